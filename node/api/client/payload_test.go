package client_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/api/client"
)

// writeTree makes files under dir: name → content; a name ending in "/"
// is an empty directory; "*" at the end of a name makes it executable.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		mode := os.FileMode(0o644)
		if strings.HasSuffix(name, "*") {
			name, mode = strings.TrimSuffix(name, "*"), 0o755
		}
		p := filepath.Join(dir, filepath.FromSlash(name))
		if strings.HasSuffix(name, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
	}
}

type entry struct {
	typ     byte
	mode    int64
	content string
}

// readArchive lists a gzip tar archive.
func readArchive(t *testing.T, archive []byte) map[string]entry {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(archive))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	out := map[string]entry{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		if !h.ModTime.Equal(time.Unix(0, 0)) || h.Uid != 0 || h.Uname != "" {
			t.Errorf("%s: time %v, uid %d, user %q: want zero", h.Name, h.ModTime, h.Uid, h.Uname)
		}
		out[h.Name] = entry{h.Typeflag, h.Mode, string(data)}
	}
}

// WriteTarGz writes a tree as the checkpoint download serves it: files and
// directories with their modes, a link to a file inside as a copy, the
// same bytes whatever the file times.
func TestWriteTarGz(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"train.py":          "print('hi')\n",
		"run.sh*":           "#!/bin/sh\necho run\n",
		"data/a.txt":        "aaa",
		"data/deep/b.txt":   "bbb",
		"empty/":            "",
		"with space/é.json": "{}",
	})
	if err := os.Symlink("data/a.txt", filepath.Join(dir, "link-a")); err != nil {
		t.Fatal(err)
	}
	pack := func() []byte {
		var buf bytes.Buffer
		if err := client.WriteTarGz(&buf, dir); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	archive := pack()
	got := readArchive(t, archive)
	want := map[string]entry{
		"train.py":          {tar.TypeReg, 0o644, "print('hi')\n"},
		"run.sh":            {tar.TypeReg, 0o755, "#!/bin/sh\necho run\n"},
		"data/":             {tar.TypeDir, 0o755, ""},
		"data/a.txt":        {tar.TypeReg, 0o644, "aaa"},
		"data/deep/":        {tar.TypeDir, 0o755, ""},
		"data/deep/b.txt":   {tar.TypeReg, 0o644, "bbb"},
		"empty/":            {tar.TypeDir, 0o755, ""},
		"with space/":       {tar.TypeDir, 0o755, ""},
		"with space/é.json": {tar.TypeReg, 0o644, "{}"},
		"link-a":            {tar.TypeReg, 0o644, "aaa"}, // a copy of its target
	}
	if len(got) != len(want) {
		t.Errorf("%d entries, want %d: %v", len(got), len(want), got)
	}
	for name, w := range want {
		if g, ok := got[name]; !ok || g != w {
			t.Errorf("%s: got %+v (present %v), want %+v", name, g, ok, w)
		}
	}
	future := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(dir, "train.py"), future, future); err != nil {
		t.Fatal(err)
	}
	if again := pack(); !bytes.Equal(again, archive) {
		t.Error("writing again gave other bytes")
	}
}

// An upload sends the manifest and the chunks the node lacks: all of a
// new tree, none of one sent before, and after an edit only the chunks
// around it. The node ends up with the tree, byte for byte.
func TestUploadPayloadSendsOnlyWhatTheNodeLacks(t *testing.T) {
	b, c := newClient(t, "")
	dir := t.TempDir()
	big := make([]byte, 6<<20)
	rand.Read(big)
	writeTree(t, dir, map[string]string{"train.py": "print('hi')\n", "data/big.bin": string(big), "empty/": ""})
	if err := os.Symlink("data/big.bin", filepath.Join(dir, "latest")); err != nil {
		t.Fatal(err)
	}
	st, err := upload(c, dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Files != 2 || st.Dirs != 2 || st.Symlinks != 1 || st.Bytes != int64(len(big))+12 {
		t.Errorf("stats %+v", st)
	}
	if st.Uploaded != st.Chunks || st.UploadedBytes != st.Bytes || st.Chunks < 3 {
		t.Errorf("first upload sent %d of %d chunks, %d of %d bytes", st.Uploaded, st.Chunks, st.UploadedBytes, st.Bytes)
	}
	if st.Ref.Manifest == "" || st.Ref.Size != st.Bytes || st.Ref.Holder == "" {
		t.Errorf("ref %+v", st.Ref)
	}
	files, ok := b.Payload(st.Ref.Manifest)
	if !ok || !bytes.Equal(files["data/big.bin"], big) || string(files["train.py"]) != "print('hi')\n" {
		t.Fatalf("the node does not hold the tree (%v)", ok)
	}

	again, err := upload(c, dir)
	if err != nil || again.Uploaded != 0 || again.UploadedBytes != 0 || again.Ref != st.Ref {
		t.Errorf("second upload of the same tree: %+v, %v; want nothing sent", again, err)
	}
	if got := b.ChunkBytesReceived(); got != st.Bytes {
		t.Errorf("the node received %d chunk bytes in all, want %d", got, st.Bytes)
	}

	big[len(big)/2] ^= 0xff // one byte in the middle of the big file
	writeTree(t, dir, map[string]string{"data/big.bin": string(big)})
	edited, err := upload(c, dir)
	if err != nil {
		t.Fatal(err)
	}
	if edited.Ref.Manifest == st.Ref.Manifest || edited.Uploaded == 0 || edited.UploadedBytes > 3*int64(blobMaxChunk) || edited.UploadedBytes >= st.Bytes {
		t.Errorf("after a one-byte edit: %d chunks, %d bytes sent of %d", edited.Uploaded, edited.UploadedBytes, edited.Bytes)
	}
	if files, ok := b.Payload(edited.Ref.Manifest); !ok || !bytes.Equal(files["data/big.bin"], big) {
		t.Error("the node does not hold the edited tree")
	}
}

const blobMaxChunk = 8 << 20

// upload scans dir and uploads it.
func upload(c *client.Client, dir string) (client.PayloadStats, error) {
	p, err := client.ScanPayload(context.Background(), dir)
	if err != nil {
		return client.PayloadStats{}, err
	}
	return c.UploadPayload(context.Background(), p)
}

func TestUploadPayloadRefuses(t *testing.T) {
	outside := t.TempDir()
	writeTree(t, outside, map[string]string{"secret": "key"})
	cases := []struct {
		name  string
		setup func(dir string) error
		want  error
		text  string
	}{
		{"link leaving the directory", func(dir string) error {
			return os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "key"))
		}, client.ErrPayloadLink, "key points outside the payload directory"},
		{"relative link climbing out", func(dir string) error {
			rel, err := filepath.Rel(filepath.Join(dir, "sub"), filepath.Join(outside, "secret"))
			if err != nil {
				return err
			}
			return os.Symlink(rel, filepath.Join(dir, "sub", "up"))
		}, client.ErrPayloadLink, "sub/up points outside"},
		{"named pipe", func(dir string) error {
			return mkfifo(filepath.Join(dir, "pipe"))
		}, client.ErrPayloadFileType, "pipe is not a file, directory or link"},
		{"backslash in a name", func(dir string) error {
			return os.WriteFile(filepath.Join(dir, `a\b`), nil, 0o644)
		}, nil, "backslash"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, c := newClient(t, "")
			dir := t.TempDir()
			writeTree(t, dir, map[string]string{"ok.txt": "fine", "sub/x": "x"})
			if err := tc.setup(dir); err != nil {
				t.Skip(err)
			}
			_, err := upload(c, dir)
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.text) || !strings.Contains(err.Error(), dir) {
				t.Errorf("error %q lacks %q or the directory", err, tc.text)
			}
			if b.ChunkBytesReceived() != 0 {
				t.Error("chunks were sent")
			}
		})
	}
	for _, p := range []string{filepath.Join(outside, "secret"), filepath.Join(outside, "missing")} {
		_, c := newClient(t, "")
		if _, err := upload(c, p); err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("UploadPayload(%s): %v", p, err)
		}
	}
}
