package executor

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The tests in this file need root, namespaces and cgroups; each skips with
// the reason otherwise (requireSandbox). They run in the default suite.

// sandboxed returns a sandbox executor for the test; mut adjusts its
// config.
func sandboxed(t testing.TB, mut func(*Config)) *Executor {
	t.Helper()
	requireSandbox(t)
	cfg := Config{Root: t.TempDir(), Isolation: IsolationSandbox, Grace: time.Second, TailBytes: 64 << 10,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if mut != nil {
		mut(&cfg)
	}
	ex, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ex.Close() })
	return ex
}

// testWriter sends log lines to t.Log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// runScript runs a shell script as an attempt and returns its result and
// output.
func runScript(t *testing.T, ex *Executor, a Attempt, script string) (Result, string, string) {
	t.Helper()
	if a.JobID == "" {
		a.JobID = "job"
	}
	a.Command = []string{"bash", "-c", script}
	r, err := ex.Start(a)
	if err != nil {
		t.Fatal(err)
	}
	res := waitDone(t, r, 60*time.Second)
	return res, readAll(t, ex, a.Name(), Stdout), readAll(t, ex, a.Name(), Stderr)
}

func TestSandboxJobRunsAsItsOwnUnprivilegedUser(t *testing.T) {
	ex := sandboxed(t, nil)
	a := Attempt{JobID: "who", Work: writeFiles(map[string]string{"data.txt": "payload-ok\n"})}
	a.Command = []string{"bash", "-c", `id -u; id -g; id -G; stat -c '%u %a' "$HOME" data.txt; cat data.txt
grep -E '^(CapEff|NoNewPrivs):' /proc/self/status; echo ready; exec sleep 300`}
	r, err := ex.Start(a)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool { return strings.Contains(string(r.Tail()), "ready") })
	uid := r.UID()
	if uid == 0 || uid < DefaultUIDMin || uid > DefaultUIDMax {
		t.Fatalf("job uid %d: want one of %d..%d", uid, DefaultUIDMin, DefaultUIDMax)
	}
	// On the node, the work dir is the job's alone.
	fi, err := os.Stat(r.WorkDir())
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != uid || int(st.Gid) != uid || fi.Mode().Perm() != 0o700 {
		t.Errorf("work dir is %d:%d %v, want %d:%d 0700", st.Uid, st.Gid, fi.Mode().Perm(), uid, uid)
	}
	r.Stop(StopCancelled)
	waitDone(t, r, 10*time.Second)
	u := strconv.Itoa(uid)
	want := strings.Join([]string{u, u, u, u + " 700", u + " 700", "payload-ok", "CapEff:\t0000000000000000", "NoNewPrivs:\t1", "ready"}, "\n") + "\n"
	if got := readAll(t, ex, a.Name(), Stdout); got != want {
		t.Errorf("job saw:\n%s\nwant:\n%s", got, want)
	}
}

func TestSandboxAttemptsCannotReadEachOther(t *testing.T) {
	ex := sandboxed(t, nil)
	a, err := ex.Start(Attempt{JobID: "owner-a", Command: []string{"bash", "-c",
		`echo s3cret > secret; chmod 644 secret; chmod 755 .; cat secret; echo ready; exec sleep 300`}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool { return strings.Contains(string(a.Tail()), "ready") })
	if !strings.Contains(string(a.Tail()), "s3cret") {
		t.Fatalf("owner A could not read its own file: %s", a.Tail())
	}
	// B knows every path and A made its file world-readable: still nothing.
	script := fmt.Sprintf(`cat %[1]s/secret; ls %[2]s; ls %[3]s; ls /proc | grep -x %[4]d; kill -9 %[4]d; echo done`,
		a.WorkDir(), a.Dir(), ex.cfg.Root, a.cmd.Process.Pid)
	res, out, errOut := runScript(t, ex, Attempt{JobID: "owner-b"}, script)
	if strings.Contains(out, "s3cret") || strings.Contains(out, "owner-a") || strings.Contains(out, strconv.Itoa(a.cmd.Process.Pid)) {
		t.Errorf("owner B saw owner A's attempt:\n%s", out)
	}
	if res.ExitCode != 0 || !strings.HasSuffix(out, "done\n") {
		t.Errorf("B's probe did not run to the end: %+v\n%s\n%s", res, out, errOut)
	}
	for _, want := range []string{"No such file or directory", "Operation not permitted"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("B's errors lack %q:\n%s", want, errOut)
		}
	}
	select {
	case <-a.Done():
		t.Errorf("owner B killed owner A's job: %+v", a.Result())
	default:
	}
	a.Stop(StopCancelled)
	waitDone(t, a, 10*time.Second)
}

func TestSandboxHidesTheNodesDataHomesAndTemp(t *testing.T) {
	// The data dir must be outside /tmp (which is private to each job
	// anyway) for the test to show HideDirs at work.
	dataDir := tempDirIn(t, "/var/lib")
	visible := tempDirIn(t, "/var/lib")
	for dir, files := range map[string][]string{dataDir: {"identity.key", "public.txt"}, visible: {"public.txt"}} {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			mode := os.FileMode(0o644)
			if f == "identity.key" {
				mode = 0o600
			}
			if err := os.WriteFile(filepath.Join(dir, f), []byte("content of "+f+"\n"), mode); err != nil {
				t.Fatal(err)
			}
		}
	}
	hostTmp, err := os.CreateTemp("/tmp", "gpumesh-host-*")
	if err != nil {
		t.Fatal(err)
	}
	hostTmp.Close()
	os.Chmod(hostTmp.Name(), 0o644)
	t.Cleanup(func() { os.Remove(hostTmp.Name()) })

	ex := sandboxed(t, func(c *Config) { c.HideDirs = []string{dataDir} })
	script := fmt.Sprintf(`
for f in %[1]s/identity.key %[1]s/public.txt %[2]s/public.txt %[3]s /etc/os-release; do
  if head -c 200 "$f" >/dev/null 2>&1; then echo "READ $f"; else echo "DENIED $f"; fi
done
echo "data dir: $(ls -A %[1]s | wc -l) entries; /root: $(ls -A /root | wc -l); /home: $(ls -A /home | wc -l); /run: $(ls -A /run | wc -l)"
`, dataDir, visible, hostTmp.Name())
	_, out, _ := runScript(t, ex, Attempt{}, script)
	for _, want := range []string{
		"DENIED " + dataDir + "/identity.key",
		"DENIED " + dataDir + "/public.txt",
		"READ " + visible + "/public.txt", // control: the same file elsewhere is readable
		"DENIED " + hostTmp.Name(),
		"READ /etc/os-release",
		"data dir: 0 entries; /root: 0; /home: 0; /run: 0",
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("job output lacks %q:\n%s", want, out)
		}
	}
}

// A node keeps its attempts inside its data dir, which is hidden (and for
// root, inside /root, hidden too): the job still gets its own directory
// there, and nothing else of the data dir.
func TestSandboxRunsWhenItsAttemptsLieInAHiddenDir(t *testing.T) {
	dataDir := tempDirIn(t, "/var/lib")
	if err := os.WriteFile(filepath.Join(dataDir, "identity.key"), []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ex := sandboxed(t, func(c *Config) {
		c.Root = filepath.Join(dataDir, "attempts")
		c.HideDirs = []string{dataDir}
	})
	res, out, errOut := runScript(t, ex, Attempt{JobID: "nested"}, fmt.Sprintf(`echo mine > own.txt && cat own.txt
if head -c 10 %[1]s/identity.key >/dev/null 2>&1; then echo "READ key"; else echo "DENIED key"; fi
ls -A %[1]s`, dataDir))
	if res.ExitCode != 0 || out != "mine\nDENIED key\nattempts\n" {
		t.Errorf("result %+v, output %q, stderr %q: want the job to write its own dir and see only the attempts path of the data dir", res, out, errOut)
	}
}

// tempDirIn makes a directory under parent, removed after the test.
func tempDirIn(t *testing.T, parent string) string {
	t.Helper()
	d, err := os.MkdirTemp(parent, "gpumesh-test-")
	if err != nil {
		t.Skipf("cannot make a directory under %s: %v", parent, err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func TestSandboxSystemIsReadOnlyAndNosuid(t *testing.T) {
	ex := sandboxed(t, nil)
	a := Attempt{JobID: "mounts"}
	r, err := ex.Start(Attempt{JobID: a.JobID, Command: []string{"bash", "-c",
		`for f in /etc/gpumesh-probe /usr/gpumesh-probe /gpumesh-probe "$HOME/ok" /tmp/ok /var/tmp/ok /dev/shm/ok "$TMPDIR/ok"; do
  if touch "$f" 2>/dev/null; then echo "WROTE $f"; else echo "REFUSED $f"; fi
done
cat /proc/self/mounts`}})
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, r, 30*time.Second)
	out := readAll(t, ex, a.Name(), Stdout)
	for _, want := range []string{"REFUSED /etc/gpumesh-probe", "REFUSED /usr/gpumesh-probe", "REFUSED /gpumesh-probe",
		"WROTE " + r.WorkDir() + "/ok", "WROTE /tmp/ok", "WROTE /var/tmp/ok", "WROTE /dev/shm/ok", "WROTE " + r.tmpDir() + "/ok"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("job output lacks %q:\n%s", want, out)
		}
	}
	// Every mount the job can reach (the last one at each point) is nosuid;
	// the writable ones are exactly the job's own.
	writable := []string{r.WorkDir(), r.CheckpointDir(), r.tmpDir(), "/tmp", "/var/tmp", "/dev", "/dev/pts", "/dev/shm", "/proc"}
	top := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 4 && strings.HasPrefix(f[1], "/") {
			top[unescapeMount(f[1])] = line
		}
	}
	mounts := 0
	for point, line := range top {
		mounts++
		opts := strings.Split(strings.Fields(line)[3], ",")
		if !slices.Contains(opts, "nosuid") {
			t.Errorf("%s is mounted without nosuid: %s", point, line)
		}
		if slices.Contains(opts, "rw") && !slices.Contains(writable, point) {
			t.Errorf("%s is writable in the sandbox: %s", point, line)
		}
	}
	if mounts < 5 {
		t.Fatalf("read %d mounts from the job:\n%s", mounts, out)
	}
}

func TestSandboxSeesOnlyItsOwnDevices(t *testing.T) {
	// Stand-ins for a node's cards: /dev/null's numbers under card names.
	devDir := t.TempDir()
	for _, n := range []string{"nvidia0", "nvidia1", "nvidiactl", "dri/renderD128"} {
		p := filepath.Join(devDir, n)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
			t.Skipf("cannot make device nodes: %v", err)
		}
	}
	os.WriteFile(filepath.Join(devDir, "notadevice"), nil, 0o644)
	ex := sandboxed(t, func(c *Config) { c.DevDir = devDir })

	_, out, _ := runScript(t, ex, Attempt{Limits: Limits{Devices: []string{"nvidia0", "/dev/nvidiactl"}}},
		`ls -A /dev | tr '\n' ' '; echo
echo hi > /dev/nvidia0 && echo "USED nvidia0"
for d in nvidia1 dri/renderD128 vda loop0 kmsg mem; do test -e /dev/$d && echo "SEES $d"; done; echo end`)
	want := "fd full null nvidia0 nvidiactl ptmx pts random shm stderr stdin stdout tty urandom zero \nUSED nvidia0\nend\n"
	if out != want {
		t.Errorf("job's /dev:\n%s\nwant:\n%s", out, want)
	}
	for name, devs := range map[string][]string{
		"missing":    {"nvidia7"},
		"not a node": {"notadevice"},
		"escape":     {"../etc/passwd"},
		"standard":   {"null"},
	} {
		_, err := ex.Start(Attempt{JobID: "bad-dev", Command: []string{"true"}, Limits: Limits{Devices: devs}})
		if err == nil || !strings.Contains(err.Error(), devs[0]) {
			t.Errorf("%s device %q: err = %v, want one naming it", name, devs[0], err)
		}
	}
}

func TestSandboxForkBombIsHeldByThePidsLimit(t *testing.T) {
	ex := sandboxed(t, nil)
	const limit = 64
	r, err := ex.Start(Attempt{JobID: "bomb", Limits: Limits{Pids: limit, CPUWeight: 1},
		Command: []string{"bash", "-c", `bomb() { bomb | bomb & }; bomb; exec sleep 300`}})
	if err != nil {
		t.Fatal(err)
	}
	cg := r.jail.(*sandboxJail).cg
	waitFor(t, 20*time.Second, func() bool { return strings.Contains(string(r.Tail()), "Resource temporarily unavailable") })
	if n := len(cg.procs()); n > limit {
		t.Errorf("%d processes in the job's cgroup, limit %d", n, limit)
	}
	// The node still forks, and another job still runs.
	if err := exec.Command("true").Run(); err != nil {
		t.Fatalf("the node cannot start a process during the bomb: %v", err)
	}
	if res, out, _ := runScript(t, ex, Attempt{JobID: "bystander"}, "echo alive"); res.ExitCode != 0 || out != "alive\n" {
		t.Errorf("a second job during the bomb: %+v %q", res, out)
	}
	r.Stop(StopCancelled)
	res := waitDone(t, r, 30*time.Second)
	if res.Stopped != StopCancelled {
		t.Errorf("result %+v", res)
	}
	if n := len(cg.procs()); n != 0 {
		t.Errorf("%d bomb processes outlived the attempt", n)
	}
}

func TestSandboxMemoryHogIsKilledNotTheNode(t *testing.T) {
	ex := sandboxed(t, nil)
	res, out, _ := runScript(t, ex, Attempt{JobID: "hog", Limits: Limits{MemoryBytes: 64 << 20}},
		`x=$(head -c 400000000 /dev/zero | tr '\0' a); echo "survived with ${#x} bytes"`)
	if !res.OOMKilled || res.Signal != "killed" || strings.Contains(out, "survived") {
		t.Errorf("hog result %+v, output %q: want killed for memory", res, out)
	}
	// A job under its limit is untouched, and the node runs it as usual.
	res, out, _ = runScript(t, ex, Attempt{JobID: "modest", Limits: Limits{MemoryBytes: 64 << 20}},
		`x=$(head -c 8000000 /dev/zero | tr '\0' a); echo "kept ${#x} bytes"`)
	if res.OOMKilled || res.ExitCode != 0 || out != "kept 8000000 bytes\n" {
		t.Errorf("modest job: %+v %q", res, out)
	}
}

func TestSandboxStopKillsProcessesThatLeftTheGroup(t *testing.T) {
	ex := sandboxed(t, func(c *Config) { c.Grace = 200 * time.Millisecond })
	r, err := ex.Start(Attempt{JobID: "escapee", Command: []string{"bash", "-c",
		`setsid bash -c 'trap "" TERM; echo $$ > escapee.pid.new; mv escapee.pid.new escapee.pid; exec sleep 300' </dev/null >/dev/null 2>&1 &
exec sleep 300`}})
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	waitFor(t, 10*time.Second, func() bool {
		b, err := os.ReadFile(filepath.Join(r.WorkDir(), "escapee.pid"))
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	})
	if pgid, err := syscall.Getpgid(pid); err != nil || pgid == r.cmd.Process.Pid {
		t.Fatalf("the escapee (pid %d) is in pgid %d, %v: want another group", pid, pgid, err)
	}
	r.Stop(StopCancelled)
	waitDone(t, r, 10*time.Second)
	if !processGone(pid) {
		t.Errorf("process %d that left the job's group survived its stop", pid)
	}
}

// processGone tells whether pid has exited: no such process, or a zombie
// waiting for the host's init to reap it.
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	_, rest, ok := strings.Cut(string(b), ") ")
	return ok && strings.HasPrefix(rest, "Z")
}

func TestSandboxCleansUpAndKeepsLogs(t *testing.T) {
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("keep=%v", keep), func(t *testing.T) {
			ex := sandboxed(t, func(c *Config) { c.KeepAttemptDirs = keep })
			a := Attempt{JobID: "tidy"}
			r, err := ex.Start(Attempt{JobID: a.JobID, Command: []string{"bash", "-c",
				`echo to-stdout; echo to-stderr >&2; echo work > w; echo ckpt > "$GPUMESH_CHECKPOINT_DIR/c"; echo tmp > "$TMPDIR/t"`}})
			if err != nil {
				t.Fatal(err)
			}
			waitDone(t, r, 30*time.Second)
			uid := r.UID()
			if got := readAll(t, ex, a.Name(), Stdout); got != "to-stdout\n" {
				t.Errorf("stdout log %q", got)
			}
			if got := readAll(t, ex, a.Name(), Stderr); got != "to-stderr\n" {
				t.Errorf("stderr log %q", got)
			}
			for _, f := range []string{stdoutFileName, stderrFileName} {
				assertOwner(t, filepath.Join(r.Dir(), f), 0, 0o600)
			}
			assertOwner(t, r.Dir(), 0, 0o700)
			assertOwner(t, filepath.Join(r.CheckpointDir(), "c"), 0, 0) // kept for the node to collect
			// The work directory waits, the uid's no more, for the node
			// to keep the outputs there; then Tidy removes it.
			assertOwner(t, filepath.Join(r.WorkDir(), "w"), 0, 0)
			if _, err := os.Stat(r.tmpDir()); keep {
				assertOwner(t, r.tmpDir(), 0, 0o700)
			} else if !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s still there after the attempt (err %v)", r.tmpDir(), err)
			}
			if err := ex.Tidy(a.Name()); err != nil {
				t.Fatal(err)
			}
			for _, d := range []string{r.WorkDir(), r.tmpDir()} {
				_, err := os.Stat(d)
				if keep {
					assertOwner(t, d, 0, 0o700)
				} else if !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s still there after Tidy (err %v)", d, err)
				}
			}
			if got := readAll(t, ex, a.Name(), Stdout); got != "to-stdout\n" {
				t.Errorf("stdout log after Tidy %q", got)
			}
			// The attempts' shared mount point holds nothing on the node:
			// each tree was mounted there in its attempt's own namespace.
			if ents, err := os.ReadDir(ex.iso.(*sandbox).mountPoint); err != nil || len(ents) != 0 {
				t.Errorf("the sandbox mount point on the node: %d entries (err %v), want an empty directory", len(ents), err)
			}
			if j := ex.iso.(*sandbox).cg.existing(cgroupName(uint32(uid))); j != nil {
				t.Errorf("cgroup of uid %d left behind", uid)
			}
			// The uid is free again: its lock can be taken.
			pool := ex.iso.(*sandbox).uids
			if !pool.tryAcquire(uint32(uid)) {
				t.Errorf("uid %d still held after the attempt", uid)
			}
			pool.release(uint32(uid))
		})
	}
}

// assertOwner checks a file's owner and, unless perm is 0, its mode.
func assertOwner(t *testing.T, path string, uid int, perm os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Error(err)
		return
	}
	st := fi.Sys().(*syscall.Stat_t)
	if int(st.Uid) != uid || (perm != 0 && fi.Mode().Perm() != perm) {
		t.Errorf("%s is uid %d mode %v, want uid %d mode %v", path, st.Uid, fi.Mode().Perm(), uid, perm)
	}
}

func TestSandboxUIDsAreNeverShared(t *testing.T) {
	// A two-uid range, shared by two executors through the lock dir.
	lockDir := t.TempDir()
	narrow := func(c *Config) { c.UIDMin, c.UIDMax, c.LockDir = 265000, 265001, lockDir }
	ex1, ex2 := sandboxed(t, narrow), sandboxed(t, narrow)
	long := []string{"sleep", "300"}
	r1, err := ex1.Start(Attempt{JobID: "one", Command: long})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := ex2.Start(Attempt{JobID: "two", Command: long})
	if err != nil {
		t.Fatal(err)
	}
	if r1.UID() == r2.UID() {
		t.Fatalf("two running attempts share uid %d", r1.UID())
	}
	if _, err := ex1.Start(Attempt{JobID: "three", Command: long}); !errors.Is(err, ErrNoUID) {
		t.Fatalf("third attempt with two uids: err = %v, want ErrNoUID", err)
	}
	if n := len(ex1.Running()); n != 1 {
		t.Errorf("%d attempts running after a refusal, want 1", n)
	}
	r2.Stop(StopCancelled)
	waitDone(t, r2, 10*time.Second)
	r3, err := ex1.Start(Attempt{JobID: "three", Command: long})
	if err != nil {
		t.Fatalf("after a uid came free: %v", err)
	}
	if r3.UID() != r2.UID() {
		t.Errorf("third attempt got uid %d, want the freed %d", r3.UID(), r2.UID())
	}
}

func TestSandboxReapsWhatADeadNodeLeft(t *testing.T) {
	requireSandbox(t)
	// A dead node's attempt: a process in cgroup u<uid> whose uid lock
	// nobody holds.
	const uid = 265100
	cfg := Config{CgroupRoot: DefaultCgroupRoot, CgroupParent: DefaultCgroupParent}
	driver, err := detectCgroups(cfg.CgroupRoot, cfg.CgroupParent)
	if err != nil {
		t.Fatal(err)
	}
	cg, err := driver.create(cgroupName(uid), Limits{}.withDefaults(), nil)
	if err != nil {
		t.Fatal(err)
	}
	orphan := exec.Command("sleep", "300")
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	reaped := make(chan struct{})
	go func() {
		orphan.Wait()
		close(reaped)
	}()
	t.Cleanup(func() {
		orphan.Process.Kill()
		<-reaped
		cg.remove(time.Now().Add(cgroupTimeout))
	})
	for _, d := range cgroupDirs(cg) {
		if err := writeFile(d, "cgroup.procs", strconv.Itoa(orphan.Process.Pid)); err != nil {
			t.Fatal(err)
		}
	}
	sandboxed(t, func(c *Config) { c.UIDMin, c.UIDMax, c.LockDir = uid, uid+1, t.TempDir() })
	select {
	case <-reaped:
	case <-time.After(10 * time.Second):
		t.Fatal("the orphan survived a new executor's start")
	}
	if driver.existing(cgroupName(uid)) != nil {
		t.Error("the orphan's cgroup survived a new executor's start")
	}
}

func cgroupDirs(j cgroupJob) []string {
	switch j := j.(type) {
	case *cgroupV1Job:
		return slices.Collect(maps.Values(j.dirs))
	case *cgroupV2Job:
		return []string{j.dir}
	}
	return nil
}
