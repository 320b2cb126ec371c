package executor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Tidy never reaches into something mounted under an attempt's work
// directory: it refuses, and what is mounted there is untouched.
func TestTidyLeavesWhatIsMountedAlone(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	ex := newExecutor(t, IsolationProcess, time.Second)
	a := Attempt{JobID: "mounted", Command: []string{"true"}}
	r, err := ex.Start(a)
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, r, 10*time.Second)
	mnt := filepath.Join(r.WorkDir(), "data dir")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	keep := filepath.Join(mnt, "precious")
	if err := os.WriteFile(keep, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ex.Tidy(a.Name()); err == nil || !strings.Contains(err.Error(), mnt+" is a mount point") {
		t.Errorf("Tidy over a mount: %v", err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("what was mounted lost a file: %v", err)
	}
	if removed, err := ex.Prune(time.Now().Add(time.Hour)); removed != 0 || err == nil {
		t.Errorf("Prune over a mount: %d removed, %v", removed, err)
	}
	if err := unix.Unmount(mnt, 0); err != nil {
		t.Fatal(err)
	}
	if err := ex.Tidy(a.Name()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.WorkDir()); !os.IsNotExist(err) {
		t.Errorf("work after the unmount and Tidy: %v", err)
	}
}
