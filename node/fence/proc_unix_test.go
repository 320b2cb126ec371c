//go:build unix

package fence

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// keeperArgv runs this test binary as a keeper (see TestMain).
func keeperArgv(t *testing.T) []string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return []string{exe, Subcommand}
}

// victim is a job attempt stand-in: `sleep 1000` in a process group of its
// own, started and reaped by the test.
type victim struct {
	t      *testing.T
	cmd    *exec.Cmd
	pgid   int
	exited chan struct{} // closed once reaped
}

func startVictim(t *testing.T, env ...string) *victim {
	t.Helper()
	cmd := exec.Command("sleep", "1000")
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	v := &victim{t: t, cmd: cmd, pgid: cmd.Process.Pid, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(v.exited)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-v.pgid, syscall.SIGKILL)
		<-v.exited
	})
	return v
}

// dies waits for the victim to be killed and reaped.
func (v *victim) dies(what string) {
	v.t.Helper()
	select {
	case <-v.exited:
		if ws, ok := v.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
			v.t.Fatalf("%s: the victim ended with %v, want killed by SIGKILL", what, v.cmd.ProcessState)
		}
	case <-time.After(wait):
		v.t.Fatalf("%s: the victim is still alive after %v", what, wait)
	}
}

// alive tells whether the victim runs: not reaped yet, and (where /proc
// tells) not a zombie waiting to be reaped either.
func (v *victim) alive() bool {
	select {
	case <-v.exited:
		return false
	default:
	}
	return !gone(v.cmd.Process.Pid)
}

// gone tells whether pid has exited: no such process, or on Linux a zombie
// (its parent, maybe init in a container, has not reaped it yet).
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	if runtime.GOOS != "linux" {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z'
}

// eventually polls cond every 10 ms until it holds or wait passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v", what, wait)
		}
		time.Sleep(10 * time.Millisecond) // polling interval
	}
}

// testLog is a logger whose output a test can read.
type testLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *testLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *testLog) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

func startKeeper(t *testing.T) (*Keeper, *testLog) {
	t.Helper()
	log := &testLog{}
	k, err := Start(keeperArgv(t), log.logger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Close() })
	return k, log
}

// nextFenced returns the next key the keeper fenced.
func nextFenced(t *testing.T, k *Keeper) string {
	t.Helper()
	select {
	case key, ok := <-k.Fenced():
		if !ok {
			t.Fatal("Fenced closed")
		}
		return key
	case <-time.After(wait):
		t.Fatal("nothing fenced")
		return ""
	}
}

// (a) Nobody writes to the keeper after the arm, as with a frozen node: the
// attempt is killed once its deadline passes, and not before.
func TestKeeperFencesOnDeadline(t *testing.T) {
	k, _ := startKeeper(t)
	v := startVictim(t)
	const within = 300 * time.Millisecond
	start := time.Now()
	if err := k.Arm("job-a/0/1", v.pgid, "", within); err != nil {
		t.Fatal(err)
	}
	if key := nextFenced(t, k); key != "job-a/0/1" {
		t.Fatalf("fenced %q", key)
	}
	if took := time.Since(start); took < within {
		t.Fatalf("fenced after %v, before its deadline of %v", took, within)
	}
	v.dies("past its deadline")
	if err := k.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// (b) Arming again moves the deadline: later, or earlier.
func TestKeeperRearm(t *testing.T) {
	k, _ := startKeeper(t)
	a, b, c := startVictim(t), startVictim(t), startVictim(t)
	// a: 1 s, moved to 3 s at once. b, 1.5 s, is the witness: when b is
	// fenced, a's first deadline is past.
	for _, arm := range []struct {
		key    string
		v      *victim
		within time.Duration
	}{{"a", a, time.Second}, {"a", a, 3 * time.Second}, {"b", b, 1500 * time.Millisecond}} {
		if err := k.Arm(arm.key, arm.v.pgid, "", arm.within); err != nil {
			t.Fatal(err)
		}
	}
	if key := nextFenced(t, k); key != "b" {
		t.Fatalf("fenced %q first, want b (a was moved past it)", key)
	}
	b.dies("b")
	if !a.alive() {
		t.Fatal("a was killed though it was armed again before its first deadline")
	}
	if key := nextFenced(t, k); key != "a" {
		t.Fatalf("fenced %q, want a", key)
	}
	a.dies("a, past its moved deadline")

	// c: an hour, moved to now.
	if err := k.Arm("c", c.pgid, "", time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := k.Arm("c", c.pgid, "", 0); err != nil {
		t.Fatal(err)
	}
	if key := nextFenced(t, k); key != "c" {
		t.Fatalf("fenced %q, want c", key)
	}
	c.dies("c, moved earlier")
}

// (e) A disarmed attempt is not killed.
func TestKeeperDisarm(t *testing.T) {
	k, _ := startKeeper(t)
	a, b := startVictim(t), startVictim(t)
	// b's deadline follows a's: when b is fenced, a would have been.
	if err := k.Arm("a", a.pgid, "", time.Second); err != nil {
		t.Fatal(err)
	}
	if err := k.Disarm("a"); err != nil {
		t.Fatal(err)
	}
	if err := k.Arm("b", b.pgid, "", 1500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if key := nextFenced(t, k); key != "b" {
		t.Fatalf("fenced %q, want b", key)
	}
	b.dies("b")
	if !a.alive() {
		t.Fatal("a was killed after it was disarmed")
	}
	if err := k.Disarm("never-armed"); err != nil {
		t.Fatalf("disarming a key not armed: %v", err)
	}
}

// (d) close: the keeper exits 0 and kills nothing, whatever is armed.
func TestKeeperCloseKillsNothing(t *testing.T) {
	k, log := startKeeper(t)
	v := startVictim(t)
	if err := k.Arm("a", v.pgid, "", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := k.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, ok := <-k.Fenced(); ok {
		t.Fatal("something was fenced")
	}
	// The keeper has exited: nothing can kill the victim now.
	if !v.alive() {
		t.Fatal("the victim died at close")
	}
	if err := k.Arm("a", v.pgid, "", time.Second); !errors.Is(err, ErrClosed) {
		t.Fatalf("Arm after Close: %v, want ErrClosed", err)
	}
	if err := k.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if s := log.String(); strings.Contains(s, "level=ERROR") || strings.Contains(s, "level=WARN") {
		t.Fatalf("a clean run logged:\n%s", s)
	}
}

// rawKeeper is a keeper started by hand, to speak the protocol directly.
type rawKeeper struct {
	t      *testing.T
	cmd    *exec.Cmd
	in     io.WriteCloser
	lines  chan string // closed at the end of its stdout
	exited chan struct{}
}

func startRaw(t *testing.T) *rawKeeper {
	t.Helper()
	argv := keeperArgv(t)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &rawKeeper{t: t, cmd: cmd, in: in, lines: make(chan string, 100), exited: make(chan struct{})}
	go func() {
		defer close(r.exited)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			r.lines <- sc.Text()
		}
		close(r.lines)
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-r.exited
	})
	if got := r.next(); got != "ready 1" {
		t.Fatalf("first line %q, want ready 1", got)
	}
	return r
}

func (r *rawKeeper) send(lines ...string) {
	r.t.Helper()
	for _, l := range lines {
		if _, err := io.WriteString(r.in, l); err != nil {
			r.t.Fatal(err)
		}
	}
}

// next returns the next event line, "" after the last.
func (r *rawKeeper) next() string {
	r.t.Helper()
	select {
	case l := <-r.lines:
		return l
	case <-time.After(wait):
		r.t.Fatal("no event")
		return ""
	}
}

func (r *rawKeeper) exitCode() int {
	r.t.Helper()
	select {
	case <-r.exited:
		return r.cmd.ProcessState.ExitCode()
	case <-time.After(wait):
		r.t.Fatal("the keeper did not exit")
		return -1
	}
}

// (c) The end of its stdin without close is the node's death: the keeper
// kills every armed attempt at once, however far their deadlines, and exits 1.
func TestKeeperNodeGoneKillsEverything(t *testing.T) {
	r := startRaw(t)
	a, b, c := startVictim(t), startVictim(t), startVictim(t)
	r.send(fmt.Sprintf("arm a %d - 600000\n", a.pgid), fmt.Sprintf("arm b %d - 600000\n", b.pgid),
		fmt.Sprintf("arm c %d - 600000\n", c.pgid), "disarm c\n")
	r.in.Close()
	a.dies("a, after the node's end")
	b.dies("b, after the node's end")
	if code := r.exitCode(); code != ExitNodeLost {
		t.Fatalf("exit %d, want %d", code, ExitNodeLost)
	}
	if !c.alive() {
		t.Fatal("c was killed though disarmed")
	}
	if l, ok := <-r.lines; ok {
		t.Fatalf("event %q after the node was gone", l)
	}
}

// (f) A malformed line is answered with an error event and changes nothing.
func TestKeeperMalformedLines(t *testing.T) {
	r := startRaw(t)
	v := startVictim(t)
	for _, b := range []struct{ line, want string }{
		{"arm k 1 - 0\n", `error arm k: pgid "1"`},
		{"arm k 0 - 0\n", `error arm k: pgid "0"`},
		{fmt.Sprintf("arm k %d - soon\n", v.pgid), `error arm k: millis "soon"`},
		{fmt.Sprintf("arm k %d - 0 extra\n", v.pgid), "error arm: want 4 arguments (KEY PGID CGROUPDIR MILLIS), got 5"},
		{fmt.Sprintf("arm k %d - 0\n", syscall.Getpgrp()), "error arm k: pgid " + strconv.Itoa(syscall.Getpgrp()) + " is the keeper's or the node's own process group"},
		{"fence k\n", `error unknown command "fence"`},
		{strings.Repeat("x", MaxLine+1) + "\n", "error line longer than 4096 bytes"},
	} {
		r.send(b.line)
		if got := r.next(); !strings.HasPrefix(got, b.want) {
			t.Errorf("%.30q: %q, want %q...", b.line, got, b.want)
		}
	}
	if !v.alive() {
		t.Fatal("a malformed line killed the victim")
	}
	r.send(fmt.Sprintf("arm k %d - 0\n", v.pgid))
	if got := r.next(); got != "fenced k" {
		t.Fatalf("after the malformed lines: %q, want fenced k", got)
	}
	v.dies("after a good arm")
	r.send("close\n")
	if code := r.exitCode(); code != ExitClosed {
		t.Fatalf("exit %d, want %d", code, ExitClosed)
	}
}

// A fence also writes "1" to the attempt's cgroup.kill; a cgroup that is
// gone is no error. (A real cgroup needs root and cgroup v2: a plain
// directory stands in, and shows what is written where.)
func TestKeeperCgroupKill(t *testing.T) {
	r := startRaw(t)
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/cgroup.kill", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	a, b := startVictim(t), startVictim(t)
	r.send(fmt.Sprintf("arm a %d %s 0\n", a.pgid, dir))
	if got := r.next(); got != "fenced a" {
		t.Fatalf("%q, want fenced a", got)
	}
	a.dies("a")
	if got, err := os.ReadFile(dir + "/cgroup.kill"); err != nil || string(got) != "1" {
		t.Fatalf("cgroup.kill holds %q, %v; want \"1\"", got, err)
	}
	r.send(fmt.Sprintf("arm b %d %s/gone 0\n", b.pgid, dir))
	if got := r.next(); got != "fenced b" {
		t.Fatalf("%q, want fenced b and no error for a cgroup that is gone", got)
	}
	b.dies("b")
	if _, err := os.Stat(dir + "/gone"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the keeper created something: %v", err)
	}
}

// The client refuses what the keeper would refuse, before sending it, and
// the keeper works on.
func TestKeeperArmValidates(t *testing.T) {
	k, log := startKeeper(t)
	v := startVictim(t)
	for _, bad := range []struct {
		key    string
		pgid   int
		cgroup string
		within time.Duration
	}{
		{"", v.pgid, "", 0},
		{"a b", v.pgid, "", 0},
		{"a\n", v.pgid, "", 0},
		{"a", 0, "", 0},
		{"a", 1, "", 0},
		{"a", -v.pgid, "", 0},
		{"a", v.pgid, "relative/dir", 0},
		{"a", v.pgid, "-", 0},
		{"a", v.pgid, "/", 0},
		{"a", v.pgid, "", -time.Second},
		{"a", v.pgid, "", MaxWithin + time.Millisecond},
	} {
		if err := k.Arm(bad.key, bad.pgid, bad.cgroup, bad.within); err == nil {
			t.Errorf("Arm(%q, %d, %q, %v) accepted", bad.key, bad.pgid, bad.cgroup, bad.within)
		}
	}
	if err := k.Disarm("a b"); err == nil {
		t.Error("Disarm of a key with a space accepted")
	}
	if err := k.Arm("a", v.pgid, "", 1500*time.Microsecond); err != nil { // truncated to 1 ms
		t.Fatal(err)
	}
	if key := nextFenced(t, k); key != "a" {
		t.Fatalf("fenced %q", key)
	}
	v.dies("after the bad arms")
	if s := log.String(); strings.Contains(s, "level=ERROR") {
		t.Fatalf("the keeper was sent something it refused:\n%s", s)
	}
}

// A keeper that dies on its own is lost: said once in the log, and in every
// later Arm, Disarm and Close; Fenced is closed.
func TestKeeperLost(t *testing.T) {
	k, log := startKeeper(t)
	if err := k.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case key, ok := <-k.Fenced():
		if ok {
			t.Fatalf("fenced %q by a killed keeper", key)
		}
	case <-time.After(wait):
		t.Fatal("Fenced still open after the keeper was killed")
	}
	for range 3 {
		if err := k.Arm("a", 4242, "", time.Second); !errors.Is(err, ErrLost) {
			t.Fatalf("Arm: %v, want ErrLost", err)
		}
	}
	if err := k.Disarm("a"); !errors.Is(err, ErrLost) {
		t.Fatalf("Disarm: %v, want ErrLost", err)
	}
	if err := k.Close(); !errors.Is(err, ErrLost) {
		t.Fatalf("Close: %v, want ErrLost", err)
	}
	if n := strings.Count(log.String(), "level=ERROR"); n != 1 || !strings.Contains(log.String(), "fence keeper lost") {
		t.Fatalf("logged the loss %d times, want once:\n%s", n, log.String())
	}
}

// Start refuses a program that does not announce itself as a keeper.
func TestStartRefusesOthers(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"sh", "-c", "echo hello; exec sleep 1000"}, `first line: unknown event "hello"`},
		{[]string{"sh", "-c", "echo ready 2; exec sleep 1000"}, `first line is "ready 2"`},
		{[]string{"sh", "-c", "exit 3"}, "exited before announcing itself: exit status 3"},
		{[]string{"/nonexistent/gpumesh"}, "starting the keeper /nonexistent/gpumesh"},
		{nil, "empty command"},
	} {
		k, err := Start(tc.argv, nil)
		if err == nil {
			k.Close()
			t.Errorf("%q: started", tc.argv)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.argv, err, tc.want)
		}
	}
}

func TestCommand(t *testing.T) {
	argv, err := Command()
	if err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	if len(argv) != 2 || argv[0] != exe || argv[1] != Subcommand {
		t.Fatalf("Command() = %q, want [%q %q]", argv, exe, Subcommand)
	}
}

// The stand-in node: it starts a keeper, arms one attempt, reports the
// keeper's pid and waits for its stdin to end.
const helperNode = "__fence-test-node"

func helperMain(name string, args []string) (int, bool) {
	if name != helperNode {
		return 0, false
	}
	pgid, _ := strconv.Atoi(args[0])
	ms, _ := strconv.Atoi(args[1])
	k, err := Start([]string{os.Args[0], Subcommand}, slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1, true
	}
	if err := k.Arm("node-test", pgid, "", time.Duration(ms)*time.Millisecond); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1, true
	}
	fmt.Printf("armed %d\n", k.cmd.Process.Pid)
	_, _ = io.Copy(io.Discard, os.Stdin)
	if err := k.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1, true
	}
	return 0, true
}

// helper is a stand-in node in a process group of its own, with its keeper.
type helper struct {
	cmd       *exec.Cmd
	keeperPID int
	exited    chan struct{}
}

func startHelperNode(t *testing.T, pgid int, within time.Duration) *helper {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, helperNode, strconv.Itoa(pgid), strconv.FormatInt(within.Milliseconds(), 10))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr testLog
	cmd.Stderr = &stderr
	in, err := cmd.StdinPipe() // held open: the node runs until killed
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helper{cmd: cmd, exited: make(chan struct{})}
	line, err := bufio.NewReader(out).ReadString('\n')
	go func() {
		_ = cmd.Wait()
		close(h.exited)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-h.exited
		in.Close()
		if h.keeperPID > 0 {
			// Its node is gone: the keeper exits too.
			eventually(t, "the keeper exits after its node", func() bool { return gone(h.keeperPID) })
		}
	})
	if _, err := fmt.Sscanf(line, "armed %d", &h.keeperPID); err != nil {
		t.Fatalf("the stand-in node said %q (%v); stderr:\n%s", line, err, stderr.String())
	}
	return h
}

// A node killed with SIGKILL: its keeper kills the attempt at once, long
// before the deadline.
func TestKeeperNodeKilled(t *testing.T) {
	v := startVictim(t)
	h := startHelperNode(t, v.pgid, 10*time.Minute)
	if err := syscall.Kill(h.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	v.dies("after its node was killed")
	eventually(t, "the keeper exits after its node", func() bool { return gone(h.keeperPID) })
}

// A node frozen with SIGSTOP to its whole process group: the keeper, in a
// group of its own, is not frozen, and fences on time.
func TestKeeperNodeFrozen(t *testing.T) {
	v := startVictim(t)
	h := startHelperNode(t, v.pgid, 500*time.Millisecond)
	if err := syscall.Kill(-h.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	v.dies("while its node was frozen")
	if gone(h.keeperPID) {
		t.Fatal("the keeper exited while its node was only frozen")
	}
}
