package executor

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// startAs starts `sleep 60` as uid (root only), killed and reaped at the
// test's end or by the returned stop.
func startAs(t *testing.T, uid uint32) (stop func()) {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := false
	stop = func() {
		if !done {
			done = true
			cmd.Process.Kill()
			cmd.Wait()
		}
	}
	t.Cleanup(stop)
	return stop
}

// The pool never hands out a uid a process of the host runs as, and the
// scanner it asks (which keeps each process's status file open from one
// scan to the next) sees processes come and go: a uid is free again once
// its process is gone, and a process that starts later under another uid
// is seen.
func TestUIDPoolSkipsTheUIDsOfTheHostsProcesses(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("starting processes under other uids needs root")
	}
	const min = 263000
	p, err := newUIDPool(t.TempDir(), min, min+10)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	noClean := func(uint32) {}

	stopFirst := startAs(t, min)
	got, err := p.acquire(noClean)
	if err != nil {
		t.Fatal(err)
	}
	if got != min+1 {
		t.Fatalf("acquired uid %d while a process runs as %d; want %d", got, min, min+1)
	}
	p.release(got)

	stopFirst()
	startAs(t, min+1)
	got, err = p.acquire(noClean)
	if err != nil {
		t.Fatal(err)
	}
	if got != min {
		t.Fatalf("acquired uid %d once the process of %d ended and one of %d started; want %d", got, min, min+1, min)
	}
	next, err := p.acquire(noClean)
	if err != nil {
		t.Fatal(err)
	}
	if next != min+2 {
		t.Fatalf("acquired uid %d while %d is held and a process runs as %d; want %d", next, min, min+1, min+2)
	}
	p.release(got)
	p.release(next)
}
