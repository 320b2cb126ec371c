package executor

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
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

// rootUIDPool is a pool of the uids min to min+10 (root only: its tests
// start processes under them), closed at the test's end.
func rootUIDPool(t *testing.T, min uint32) *uidPool {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("starting processes under other uids needs root")
	}
	p, err := newUIDPool(t.TempDir(), min, min+10)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.close)
	return p
}

// noClean is acquire's clean for a pool no dead holder left anything in.
func noClean(uint32) {}

// The pool never hands out a uid a process of the host runs as, and the
// scanner it asks (which keeps each process's status file open from one
// scan to the next) sees processes come and go: a uid is free again once
// its process is gone, and a process that starts later under another uid
// is seen.
func TestUIDPoolSkipsTheUIDsOfTheHostsProcesses(t *testing.T) {
	const min = 263000
	p := rootUIDPool(t, min)

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

// Attempts started one after another share one scan of the host's
// processes while it is fresh, and a uid the scan shows in use is looked
// at again before it is passed over: the process the scan saw (an
// attempt's own, since ended) may be gone. A scan too old is made again.
func TestUIDPoolScansTheHostsProcessesOncePerFreshScan(t *testing.T) {
	const min = 263100
	p := rootUIDPool(t, min)
	p.scanFresh = time.Hour

	stop := startAs(t, min+2)
	for i := 0; i < 3; i++ {
		got, err := p.acquire(noClean)
		if err != nil {
			t.Fatal(err)
		}
		if got != min {
			t.Fatalf("start %d acquired uid %d; want %d", i, got, min)
		}
		p.release(got)
	}
	if p.scan.scans != 1 {
		t.Fatalf("three starts in a row scanned the host's processes %d times; want 1", p.scan.scans)
	}

	// Two held: the third uid is in use by the process the scan saw. The
	// pool scans again, sees it, and passes it over.
	a, _ := p.acquire(noClean)
	b, _ := p.acquire(noClean)
	c, err := p.acquire(noClean)
	if err != nil {
		t.Fatal(err)
	}
	if a != min || b != min+1 || c != min+3 {
		t.Fatalf("acquired %d, %d, %d while a process runs as %d; want %d, %d, %d", a, b, c, min+2, min, min+1, min+3)
	}
	if p.scan.scans != 2 {
		t.Fatalf("%d scans; want 2 (the uid shown in use is looked at again)", p.scan.scans)
	}
	p.release(c)

	// Once that process is gone, the uid the scan showed in use is handed
	// out: the pool looks again rather than trust the scan.
	stop()
	got, err := p.acquire(noClean)
	if err != nil {
		t.Fatal(err)
	}
	if got != min+2 {
		t.Fatalf("acquired uid %d once the process of %d ended; want %d", got, min+2, min+2)
	}
	p.release(got)

	// A scan older than scanFresh is made again.
	p.scanFresh = 0
	scans := p.scan.scans
	got, _ = p.acquire(noClean)
	p.release(got)
	if p.scan.scans != scans+1 {
		t.Fatalf("a stale scan was trusted (%d scans, want %d)", p.scan.scans, scans+1)
	}
	p.release(a)
	p.release(b)
}
