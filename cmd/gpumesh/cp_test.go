package main

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
)

// archiveOf is a tar as a node sends a directory: "./" first, then the
// entries; names ending in "/" are directories, the rest files.
func archiveOf(t *testing.T, dir bool, entries ...[2]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if dir {
		if err := tw.WriteHeader(&tar.Header{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range entries {
		h := &tar.Header{Name: e[0], Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(e[1]))}
		if strings.HasSuffix(e[0], "/") {
			h.Typeflag, h.Mode, h.Size = tar.TypeDir, 0o755, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(e[1]))
	}
	tw.Close()
	return buf.Bytes()
}

func TestCpCopiesAJobsFilesOut(t *testing.T) {
	n := newFakeNode(t)
	n.b.AddJob(market.JobRecord{ID: "j1", State: market.JobRunning})
	n.b.SetFiles("j1", 0, archiveOf(t, true, [2]string{"ckpt/", ""}, [2]string{"ckpt/w.bin", "weights"}, [2]string{"log.txt", "step 47\n"}))
	dst := t.TempDir()
	code, out, errOut := n.run("cp", "j1:/outputs", dst)
	if want := filepath.Join(dst, "outputs") + " (2 directories, 2 files, 15 bytes)\n"; code != 0 || out != want || errOut != "" {
		t.Fatalf("exit %d, stdout %q (want %q), stderr %q", code, out, want, errOut)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "outputs", "ckpt", "w.bin")); string(b) != "weights" {
		t.Errorf("ckpt/w.bin: %q", b)
	}
	if got := n.b.FilesAsked(); len(got) != 1 || got[0] != (api.FilesRequest{Job: "j1", Path: "/outputs"}) {
		t.Errorf("the node was asked %+v", got)
	}
	// One file, of share 1, to a new name.
	n.b.SetFiles("j1", 1, archiveOf(t, false, [2]string{"model.bin", "w1"}))
	to := filepath.Join(dst, "share1-model.bin")
	if code, out, errOut := n.run("cp", "--share", "1", "j1:model.bin", to); code != 0 || out != to+" (1 file, 2 bytes)\n" {
		t.Errorf("one file: exit %d, %q %q", code, out, errOut)
	}
	if b, _ := os.ReadFile(to); string(b) != "w1" {
		t.Errorf("%s: %q", to, b)
	}
}

// Bad arguments are usage errors; a refusal, a bad archive or a
// destination in the way is said in one line, and nothing is written.
func TestCpRefusals(t *testing.T) {
	n := newFakeNode(t)
	n.b.AddJob(market.JobRecord{ID: "j1", State: market.JobSucceeded})
	dst := t.TempDir()
	if err := os.Mkdir(filepath.Join(dst, "outputs"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args    []string
		archive []byte
		code    int
		want    []string
	}{
		{[]string{"cp", "j1", dst}, nil, exitUsage, []string{`"j1": want JOB:PATH`}},
		{[]string{"cp", "j1:../../etc", dst}, nil, exitUsage, []string{"leaves the job's working directory"}},
		{[]string{"cp", "BAD ID:x", dst}, nil, exitUsage, []string{"BAD ID"}},
		{[]string{"cp", "j1:x"}, nil, exitUsage, []string{"2 arg"}},
		{[]string{"cp", "--share", "-1", "j1:x", dst}, nil, exitUsage, []string{"--share"}},
		{[]string{"cp", "j1:nope", dst}, nil, 1, []string{`job j1 share 0: no "nope" in its working directory`}},
		{[]string{"cp", "nojob:x", dst}, nil, 1, []string{"nojob"}},
		{[]string{"cp", "j1:/outputs", dst}, archiveOf(t, true, [2]string{"a", "1"}), 1,
			[]string{filepath.Join(dst, "outputs") + " exists: remove it or name another destination"}},
		{[]string{"cp", "j1:/x", dst}, archiveOf(t, true, [2]string{"../evil", "1"}), 1,
			[]string{"the node sent /x of job j1 that cannot be written", `".." element`, "nothing was written"}},
		{[]string{"cp", "j1:/x", filepath.Join(dst, "no", "such", "dir")}, archiveOf(t, true, [2]string{"a", "1"}), 1,
			[]string{"no such directory to copy into"}},
	} {
		n.b.SetFiles("j1", 0, c.archive)
		code, out, errOut := n.run(c.args...)
		if code != c.code || out != "" {
			t.Errorf("%q: exit %d, stdout %q; want exit %d", c.args, code, out, c.code)
		}
		oneLineErr(t, strings.Join(c.args, " "), errOut, c.want...)
		entries, _ := os.ReadDir(dst)
		if len(entries) != 1 {
			t.Errorf("%q: the destination holds %d entries, want only outputs/", c.args, len(entries))
		}
		if left, _ := os.ReadDir(filepath.Join(dst, "outputs")); len(left) != 0 {
			t.Errorf("%q: wrote into outputs/", c.args)
		}
	}
}
