package datadir

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestCheckDataDir(t *testing.T) {
	root := t.TempDir()
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ dir, why string }{
		{root, ""},
		{filepath.Join(root, "new", "deeper"), ""},
		{file, "is a file, not a directory"},
		{filepath.Join(file, "sub", "deeper"), file + " is a file, not a directory"},
		{"", "none given"},
	} {
		err := Check(tc.dir)
		var dde *Error
		switch {
		case tc.why == "" && err != nil:
			t.Errorf("%q: %v", tc.dir, err)
		case tc.why != "" && (!errors.As(err, &dde) || dde.Why != tc.why || !strings.Contains(err.Error(), "data directory "+tc.dir+": ")):
			t.Errorf("%q: %v; want a Error saying %q", tc.dir, err, tc.why)
		}
	}
	// Nothing was written.
	if entries, _ := os.ReadDir(root); len(entries) != 1 {
		t.Errorf("the checks left %d entries in %s", len(entries), root)
	}
	if os.Geteuid() != 0 && runtime.GOOS != "windows" { // root writes anywhere
		ro := filepath.Join(root, "ro")
		if err := os.Mkdir(ro, 0o500); err != nil {
			t.Fatal(err)
		}
		if err := Check(ro); err == nil || !strings.Contains(err.Error(), "cannot write in it") {
			t.Errorf("a read-only dir: %v", err)
		}
		if err := Check(filepath.Join(ro, "new")); err == nil || !strings.Contains(err.Error(), "cannot create it in "+ro) {
			t.Errorf("under a read-only dir: %v", err)
		}
	}
}
