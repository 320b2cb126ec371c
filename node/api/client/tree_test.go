package client

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tarOf makes an archive of the headers, each regular file's body its
// Linkname (which tar leaves out for a regular file).
func tarOf(t testing.TB, hs ...tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hs {
		body := ""
		if h.Typeflag == tar.TypeReg {
			body, h.Linkname = h.Linkname, ""
			h.Size = int64(len(body))
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func dirH(name string, mode int64) tar.Header {
	return tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: mode}
}
func fileH(name, body string, mode int64) tar.Header {
	return tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: mode, Linkname: body}
}
func linkH(name, target string) tar.Header {
	return tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target}
}

func TestReadTreeWritesADirectoryOrAFile(t *testing.T) {
	dir := t.TempDir()
	st, err := ReadTree(bytes.NewReader(tarOf(t, dirH("./", 0o755), dirH("data/", 0o500), fileH("data/x.csv", "1,2\n", 0o640),
		fileH("run.sh", "#!/bin/sh\n", 0o755), linkH("latest", "data/x.csv"))), dir)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Dir || st.Files != 2 || st.Dirs != 1 || st.Symlinks != 1 || st.Bytes != 14 {
		t.Errorf("stats %+v", st)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "latest")); err != nil || string(b) != "1,2\n" {
		t.Errorf("through the link: %q %v", b, err)
	}
	for name, want := range map[string]os.FileMode{"run.sh": 0o755, "data/x.csv": 0o640, "data": 0o700 | 0o500} {
		if fi, err := os.Lstat(filepath.Join(dir, name)); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v (%v)", name, fi.Mode().Perm(), want, err)
		}
	}
	one := t.TempDir()
	st, err = ReadTree(bytes.NewReader(tarOf(t, fileH("model.bin", "weights", 0o600))), one)
	if err != nil || st.Dir || st.Name != "model.bin" || st.Files != 1 {
		t.Fatalf("one file: %+v %v", st, err)
	}
	if b, _ := os.ReadFile(filepath.Join(one, "model.bin")); string(b) != "weights" {
		t.Errorf("model.bin: %q", b)
	}
}

// Every archive that is not a tree the node would send is refused,
// naming what is wrong, and nothing lands outside the directory.
func TestReadTreeRefusesBadArchives(t *testing.T) {
	good := tarOf(t, dirH("./", 0o755), fileH("a", strings.Repeat("z", 4096), 0o644))
	for name, c := range map[string]struct {
		archive []byte
		want    string
	}{
		"empty":            {nil, "it is empty"},
		"cut":              {good[:1024], "cut after"},
		"not a tar":        {[]byte(strings.Repeat("junk", 300)), "bad archive"},
		"absolute":         {tarOf(t, dirH("./", 0o755), fileH("/etc/evil", "x", 0o644)), "is absolute"},
		"climbs out":       {tarOf(t, dirH("./", 0o755), fileH("../evil", "x", 0o644)), `".." element`},
		"climbs out later": {tarOf(t, dirH("./", 0o755), dirH("a/", 0o755), fileH("a/../../evil", "x", 0o644)), `".." element`},
		"through a link":   {tarOf(t, dirH("./", 0o755), linkH("out", ".."), fileH("out/evil", "x", 0o644)), `"out/evil"`},
		"hard link":        {tarOf(t, dirH("./", 0o755), tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "/etc/passwd"}), "tar type"},
		"device":           {tarOf(t, dirH("./", 0o755), tar.Header{Name: "d", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}), "tar type"},
		"twice":            {tarOf(t, dirH("./", 0o755), fileH("a", "1", 0o644), fileH("a", "2", 0o644)), "named twice"},
		"after a file":     {tarOf(t, fileH("a", "1", 0o644), fileH("b", "2", 0o644)), "after the one file"},
		"file in a dir":    {tarOf(t, fileH("a/b", "1", 0o644)), "neither"},
		"backslash":        {tarOf(t, dirH("./", 0o755), fileH(`a\b`, "1", 0o644)), "backslash"},
		"no parent":        {tarOf(t, dirH("./", 0o755), fileH("nodir/a", "1", 0o644)), `"nodir/a"`},
	} {
		top := t.TempDir()
		dir := filepath.Join(top, "tree")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		_, err := ReadTree(bytes.NewReader(c.archive), dir)
		if !errors.Is(err, ErrBadArchive) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want ErrBadArchive saying %q", name, err, c.want)
		}
		if entries, _ := os.ReadDir(top); len(entries) != 1 {
			t.Errorf("%s: %d entries beside the tree", name, len(entries))
		}
	}
}

// FuzzReadTree: whatever the archive, ReadTree writes nothing outside its
// directory, and what it says it wrote is there.
func FuzzReadTree(f *testing.F) {
	f.Add(tarOf(f, dirH("./", 0o755), dirH("d/", 0o755), fileH("d/x", "xyz", 0o644), linkH("l", "d/x")))
	f.Add(tarOf(f, fileH("one", "1", 0o600)))
	f.Add(tarOf(f, dirH("./", 0o755), linkH("out", ".."), fileH("out/evil", "x", 0o644)))
	f.Add(tarOf(f, dirH("./", 0o755), fileH("../evil", "x", 0o644)))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, archive []byte) {
		// A header may claim a file of any size (a sparse one's holes cost
		// nothing to send): that is the job's data, not a fault; leave
		// such archives out so that each run stays small.
		tr := tar.NewReader(bytes.NewReader(archive))
		for {
			h, err := tr.Next()
			if err != nil {
				break
			}
			if h.Size > 1<<20 {
				return
			}
		}
		top, err := os.MkdirTemp("", "fuzz-tree-*")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(top)
		dir := filepath.Join(top, "tree")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		st, err := ReadTree(bytes.NewReader(archive), dir)
		if entries, _ := os.ReadDir(top); len(entries) != 1 {
			t.Fatalf("%d entries beside the tree (err %v)", len(entries), err)
		}
		if err != nil {
			return
		}
		if !st.Dir {
			if fi, err := os.Lstat(filepath.Join(dir, st.Name)); err != nil || !fi.Mode().IsRegular() {
				t.Fatalf("the one file %q is not there: %v", st.Name, err)
			}
		}
	})
}
