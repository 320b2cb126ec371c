package client_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api/client"
	"github.com/gpumesh/gpumesh/node/executor"
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

func TestPackDirRoundTrip(t *testing.T) {
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
	archive, err := client.PackDir(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
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

	// The same tree packs to the same bytes, whatever the file times.
	future := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(dir, "train.py"), future, future); err != nil {
		t.Fatal(err)
	}
	again, err := client.PackDir(dir, 0)
	if err != nil || !bytes.Equal(again, archive) {
		t.Errorf("packing again gave other bytes (err %v)", err)
	}
	// A changed file changes the digest.
	writeTree(t, dir, map[string]string{"train.py": "print('bye')\n"})
	changed, _ := client.PackDir(dir, 0)
	if client.PayloadDigest(changed) == client.PayloadDigest(archive) {
		t.Error("a changed file kept the digest")
	}
}

// The node's executor unpacks what PackDir packs, and the job sees the files
// with their modes.
func TestPackDirUnpacksInTheExecutor(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"run.sh*": "#!/bin/sh\ncat data/a.txt\n", "data/a.txt": "payload seen\n"})
	archive, err := client.PackDir(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	ex, err := executor.New(executor.Config{Root: t.TempDir(), Isolation: executor.IsolationProcess, Grace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	run, err := ex.Start(executor.Attempt{JobID: "j1", Epoch: 1, Command: []string{"./run.sh"}, Payload: bytes.NewReader(archive)})
	if errors.Is(err, executor.ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-run.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the job did not end")
	}
	if res := run.Result(); res.ExitCode != 0 {
		t.Fatalf("exit %d; output %q", res.ExitCode, run.Tail())
	}
	if got := string(run.Tail()); got != "payload seen\n" {
		t.Errorf("job printed %q", got)
	}
}

func TestPackDirRefuses(t *testing.T) {
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
		}, client.ErrPayloadLink, "points outside"},
		{"broken link", func(dir string) error {
			return os.Symlink("nowhere", filepath.Join(dir, "dangling"))
		}, client.ErrPayloadLink, "dangling is broken"},
		{"link to a directory", func(dir string) error {
			return os.Symlink("sub", filepath.Join(dir, "again"))
		}, client.ErrPayloadLink, "again points at a directory"},
		{"link to itself", func(dir string) error {
			return os.Symlink(".", filepath.Join(dir, "dot"))
		}, client.ErrPayloadLink, "dot points at a directory"},
		{"named pipe", func(dir string) error {
			return mkfifo(filepath.Join(dir, "pipe"))
		}, client.ErrPayloadFileType, "pipe is a named pipe"},
		{"backslash in a name", func(dir string) error {
			return os.WriteFile(filepath.Join(dir, `a\b`), nil, 0o644)
		}, client.ErrPayloadFileType, "backslash"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeTree(t, dir, map[string]string{"ok.txt": "fine", "sub/x": "x"})
			if err := tc.setup(dir); err != nil {
				t.Skip(err)
			}
			archive, err := client.PackDir(dir, 0)
			if !errors.Is(err, tc.want) || archive != nil {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.text) || !strings.Contains(err.Error(), dir) {
				t.Errorf("error %q lacks %q or the directory", err, tc.text)
			}
		})
	}
	for _, p := range []string{filepath.Join(outside, "secret"), filepath.Join(outside, "missing")} {
		if _, err := client.PackDir(p, 0); err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("PackDir(%s): %v", p, err)
		}
	}
}

func TestPackDirSizeCap(t *testing.T) {
	dir := t.TempDir()
	noise := make([]byte, 300<<10) // incompressible
	rand.Read(noise)
	if err := os.WriteFile(filepath.Join(dir, "noise.bin"), noise, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := client.PackDir(dir, 256<<10)
	if !errors.Is(err, client.ErrPayloadTooLarge) || !strings.Contains(err.Error(), "over 256 KiB") {
		t.Fatalf("err = %v", err)
	}
	archive, err := client.PackDir(dir, 400<<10)
	if err != nil || len(archive) <= 300<<10 || len(archive) > 400<<10 {
		t.Fatalf("under the cap: %d bytes, %v", len(archive), err)
	}
	// Exactly at the cap fits; one byte less does not.
	if _, err := client.PackDir(dir, int64(len(archive))); err != nil {
		t.Errorf("at the cap: %v", err)
	}
	if _, err := client.PackDir(dir, int64(len(archive))-1); !errors.Is(err, client.ErrPayloadTooLarge) {
		t.Errorf("one byte over: %v", err)
	}
}

func TestPutPayload(t *testing.T) {
	b, c := newClient(t, "")
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"a": "a"})
	archive, _ := client.PackDir(dir, 0)
	ref, err := c.PutPayload(context.Background(), archive)
	if err != nil {
		t.Fatal(err)
	}
	if ref.Digest != client.PayloadDigest(archive) || ref.Size != int64(len(archive)) {
		t.Errorf("ref %+v", ref)
	}
	if stored, ok := b.Payload(ref.Digest); !ok || !bytes.Equal(stored, archive) {
		t.Error("the node did not store the archive")
	}
	if _, err := c.PutPayload(context.Background(), make([]byte, market.MaxPayloadBytes+1)); !errors.Is(err, client.ErrPayloadTooLarge) {
		t.Errorf("oversize: %v", err)
	}
	if _, err := c.PutPayload(context.Background(), nil); err == nil {
		t.Error("empty archive accepted")
	}
}

// A node that answers with another digest than the archive's is caught.
func TestPutPayloadDigestMismatch(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(market.PayloadRef{Digest: "sha256:" + strings.Repeat("0", 64), Size: 3})
	}))
	defer srv.Close()
	c, _ := client.New(srv.URL)
	defer c.CloseIdleConnections()
	_, err := c.PutPayload(context.Background(), []byte("abc"))
	if err == nil || !strings.Contains(err.Error(), "the node stored sha256:000") {
		t.Errorf("err = %v", err)
	}
}

func TestPutPayloadTooLargeForNode(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		w.Write([]byte(`{"error":"payload over 67108864 bytes"}`))
	}))
	defer srv.Close()
	c, _ := client.New(srv.URL)
	defer c.CloseIdleConnections()
	_, err := c.PutPayload(context.Background(), []byte("abc"))
	if !errors.Is(err, client.ErrBadRequest) || !strings.Contains(err.Error(), "payload over") {
		t.Errorf("err = %v", err)
	}
}
