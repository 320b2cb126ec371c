package executor

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The tests in this file run jobs in images under the real OCI runtime
// (crun or runc, whichever works here: crun refuses hosts whose cgroup v2
// hierarchy holds controllers beside v1 ones); they skip with the reason
// without root, a sandbox or a working runtime.

var (
	imageJobOnce sync.Once
	imageJobBin  string
	imageJobErr  error
)

// imageJob builds testdata/imagejob as a static binary, once.
func imageJob(t testing.TB) string {
	t.Helper()
	imageJobOnce.Do(func() {
		dir, err := os.MkdirTemp("", "imagejob")
		if err != nil {
			imageJobErr = err
			return
		}
		imageJobBin = filepath.Join(dir, "imagejob")
		cmd := exec.Command("go", "build", "-o", imageJobBin, "./testdata/imagejob")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			imageJobErr = err
			imageJobBin = string(out)
		}
	})
	if imageJobErr != nil {
		t.Fatalf("building the image's entrypoint: %v\n%s", imageJobErr, imageJobBin)
	}
	return imageJobBin
}

// containerized returns a sandbox executor that runs images, or skips.
func containerized(t testing.TB, mut func(*Config)) *Executor {
	t.Helper()
	ex := sandboxed(t, func(c *Config) {
		c.Runtime = RuntimeAuto
		if mut != nil {
			mut(c)
		}
	})
	if caps := ex.Capabilities(); caps.Runtime == "" {
		t.Skipf("no image runs here: %s", caps.ImagesReason)
	}
	return ex
}

// testRootfs makes an image's root file system: the entrypoint at
// /bin/job, an /etc/passwd with a user app (1000) in group video (44),
// a /app directory, all owned by container root as an unpacked image is.
func testRootfs(t testing.TB, base uint32) string {
	t.Helper()
	root := t.TempDir()
	bin := imageJob(t)
	for _, d := range []string{"bin", "etc", "app", "tmp"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	os.Chmod(filepath.Join(root, "tmp"), 0o1777)
	os.Chmod(filepath.Join(root, "app"), 0o777)
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, "bin", "job"), b, 0o755)
	os.WriteFile(filepath.Join(root, "etc", "passwd"), []byte("root:x:0:0::/root:/bin/sh\napp:x:1000:1000::/app:/bin/sh\n"), 0o644)
	os.WriteFile(filepath.Join(root, "etc", "group"), []byte("root:x:0:\napp:x:1000:\nvideo:x:44:app\n"), 0o644)
	filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
		if err == nil {
			err = os.Lchown(p, int(base), int(base))
		}
		return err
	})
	return root
}

// report reads the "key value" lines of the entrypoint's output.
func report(out string) map[string]string {
	m := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), " ")
		if k == "env" || k == "write" {
			kk, vv, _ := strings.Cut(v, "=")
			if k == "write" {
				kk, vv, _ = strings.Cut(v, " ")
			}
			m[k+" "+kk] = vv
			continue
		}
		m[k] = v
	}
	return m
}

// A job in an image runs the image's process under the runtime: its
// argv, environment under the job's, working directory and user; it sees
// exactly its own device nodes and the visibility variable; it writes in
// its work and checkpoint directories, its /tmp and its own layer over
// the image, which stays unchanged and is shared.
func TestImageJobRunsTheImagesProcess(t *testing.T) {
	devDir := t.TempDir()
	for _, n := range []string{"nvidia0", "nvidia1", "nvidiactl"} {
		if err := unix.Mknod(filepath.Join(devDir, n), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
			t.Skipf("cannot make device nodes: %v", err)
		}
	}
	ex := containerized(t, func(c *Config) { c.DevDir = devDir })
	base := ex.Config().ContainerIDBase
	rootfs := testRootfs(t, base)
	a := Attempt{JobID: "img", Share: 1, Epoch: 2,
		Env:       map[string]string{"FROM_JOB": "job", "FROM_IMAGE": "overridden"},
		DeviceEnv: map[string]string{"CUDA_VISIBLE_DEVICES": "GPU-1234"},
		Limits:    Limits{Devices: []string{"nvidia0", "nvidiactl"}},
		Image: &Container{Rootfs: rootfs, Args: []string{"/bin/job", "report", "--flag"}, Env: []string{"FROM_IMAGE=image", "PATH=/bin"},
			Cwd: "/app", UID: 1000, GID: 1000, Groups: []uint32{44}}}
	r, err := ex.Start(a)
	if err != nil {
		t.Fatal(err)
	}
	res := waitDone(t, r, 60*time.Second)
	out, errOut := readAll(t, ex, a.Name(), Stdout), readAll(t, ex, a.Name(), Stderr)
	if res.ExitCode != 0 {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", res.ExitCode, out, errOut)
	}
	got := report(out)
	for k, want := range map[string]string{
		"args": "report --flag", "uid": "1000", "gid": "1000", "groups": "[44]", "cwd": "/app", "hostname": "img", "pid": "1",
		"env FROM_IMAGE": "overridden", "env FROM_JOB": "job", "env CUDA_VISIBLE_DEVICES": "GPU-1234", "env PATH": "/bin",
		"env HOME": "/gpumesh/work", "env GPUMESH_WORK_DIR": "/gpumesh/work", "env GPUMESH_CHECKPOINT_DIR": "/gpumesh/checkpoint", "env TMPDIR": "/tmp",
		"write work": "true", "write checkpoint": "true", "write layer": "true", "write tmp": "true", "node-file": "false",
	} {
		if got[k] != want {
			t.Errorf("%s: %q, want %q", k, got[k], want)
		}
	}
	if devs := got["dev"]; !strings.Contains(devs, "nvidia0") || !strings.Contains(devs, "nvidiactl") || strings.Contains(devs, "nvidia1") {
		t.Errorf("the job's /dev: %s", devs)
	}
	if b, err := os.ReadFile(filepath.Join(r.CheckpointDir(), "ckpt.txt")); err != nil || string(b) != "checkpoint" {
		t.Errorf("the checkpoint directory holds %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(rootfs, "app", "written-in-layer")); !os.IsNotExist(err) {
		t.Errorf("the job wrote into the shared image: %v", err)
	}
	if _, err := os.Stat(filepath.Join(r.Dir(), "upper")); !os.IsNotExist(err) {
		t.Errorf("the attempt's writable layer outlives it: %v", err)
	}
}

// The job's exit code comes back; a stop ends it (SIGTERM, then SIGKILL
// after the grace) and nothing of it is left.
func TestImageJobExitAndStop(t *testing.T) {
	ex := containerized(t, nil)
	rootfs := testRootfs(t, ex.Config().ContainerIDBase)
	a := Attempt{JobID: "exit", Image: &Container{Rootfs: rootfs, Args: []string{"/bin/job", "exit", "7"}, Cwd: "/"}}
	r, err := ex.Start(a)
	if err != nil {
		t.Fatal(err)
	}
	if res := waitDone(t, r, 60*time.Second); res.ExitCode != 7 {
		t.Errorf("exit code %d, want 7: %s", res.ExitCode, readAll(t, ex, a.Name(), Stderr))
	}
	b := Attempt{JobID: "sleeper", Image: &Container{Rootfs: rootfs, Args: []string{"/bin/job", "sleep"}, Cwd: "/"}}
	r, err = ex.Start(b)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, func() bool { return strings.Contains(readAll(t, ex, b.Name(), Stdout), "node-file") })
	r.Stop(StopCancelled)
	res := waitDone(t, r, 60*time.Second)
	if res.Stopped != StopCancelled {
		t.Errorf("result %+v", res)
	}
	missing := Attempt{JobID: "missing", Image: &Container{Rootfs: rootfs, Args: []string{"/bin/nothing"}, Cwd: "/"}}
	r, err = ex.Start(missing)
	if err != nil {
		t.Fatal(err)
	}
	if res := waitDone(t, r, 60*time.Second); res.ExitCode == 0 {
		t.Errorf("a missing entrypoint exited 0")
	}
	if stderr := readAll(t, ex, missing.Name(), Stderr); !strings.Contains(stderr, "/bin/nothing") {
		t.Errorf("stderr does not name the missing command: %q", stderr)
	}
}

// Without a runtime (or outside the sandbox) an image attempt fails to
// start, saying why; the capabilities say it too.
func TestNoRuntimeRunsNoImages(t *testing.T) {
	ex, err := New(Config{Root: t.TempDir(), Isolation: IsolationProcess})
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	if c := ex.Capabilities(); c.Runtime != "" || !strings.Contains(c.ImagesReason, "sandbox") {
		t.Errorf("process mode: %+v", c)
	}
	_, err = ex.Start(Attempt{JobID: "x", Image: &Container{Rootfs: "/nonexistent", Args: []string{"/bin/job"}, Cwd: "/"}})
	if err == nil || !strings.Contains(err.Error(), "images run only in the sandbox") {
		t.Errorf("start: %v", err)
	}
}

// gpumesh exec reaches into a job in an image: its command runs in the
// container, as the image's user, in its working directory.
func TestImageJobExec(t *testing.T) {
	ex := containerized(t, nil)
	rootfs := testRootfs(t, ex.Config().ContainerIDBase)
	a := Attempt{JobID: "execd", Image: &Container{Rootfs: rootfs, Args: []string{"/bin/job", "sleep"}, Cwd: "/app", UID: 1000, GID: 1000}}
	r, err := ex.Start(a)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop(StopCancelled)
	waitFor(t, 60*time.Second, func() bool { return strings.Contains(readAll(t, ex, a.Name(), Stdout), "node-file") })
	var out strings.Builder
	p, err := r.Exec(ExecRequest{Command: []string{"/bin/job", "from-exec"}, Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatal(err)
	}
	if code, sig := p.Wait(); code != 0 || sig != "" {
		t.Fatalf("exec exited %d %s: %s", code, sig, out.String())
	}
	got := report(out.String())
	if got["args"] != "from-exec" || got["uid"] != "1000" || got["cwd"] != "/app" || got["pid"] == "1" {
		t.Errorf("exec saw %v", got)
	}
}

// gpumesh exec -t reaches into a job in an image: the command gets a
// terminal of the container's, of the size asked for, then of each new
// size; what is typed reaches it, and Ctrl-C interrupts it.
func TestImageJobExecWithATerminal(t *testing.T) {
	ex := containerized(t, nil)
	rootfs := testRootfs(t, ex.Config().ContainerIDBase)
	a := Attempt{JobID: "execdtty", Image: &Container{Rootfs: rootfs, Args: []string{"/bin/job", "sleep"}, Cwd: "/app", UID: 1000, GID: 1000}}
	r, err := ex.Start(a)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop(StopCancelled)
	waitFor(t, 60*time.Second, func() bool { return strings.Contains(readAll(t, ex, a.Name(), Stdout), "node-file") })
	p, err := r.Exec(ExecRequest{Command: []string{"/bin/job", "tty"}, Env: map[string]string{"TERM": "xterm"}, TTY: true, Rows: 33, Cols: 101})
	if err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 64)
	go func() { // ends when Wait closes the terminal
		defer close(lines)
		s := bufio.NewScanner(p.TTY())
		for s.Scan() {
			lines <- strings.TrimRight(s.Text(), "\r")
		}
	}()
	var seen []string
	expect := func(want string) {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case got, ok := <-lines:
				if !ok {
					t.Fatalf("the terminal closed before %q; it showed %q", want, seen)
				}
				seen = append(seen, got)
				if got == want {
					return
				}
			case <-timeout:
				t.Fatalf("no %q from the process; it showed %q", want, seen)
			}
		}
	}
	expect("uid 1000")
	expect("tty true")
	expect("size 33 101")
	if _, err := p.TTY().Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	expect("got hello")
	if err := p.Resize(40, 120); err != nil {
		t.Fatal(err)
	}
	expect("winch 40 120")
	if _, err := p.TTY().Write([]byte{3}); err != nil { // Ctrl-C, as a terminal sends it
		t.Fatal(err)
	}
	expect("^C")
	code, sig := p.Wait()
	if code != 130 || sig != "" {
		t.Errorf("exit %d signal %q; want 130 (SIGINT)", code, sig)
	}
	for range lines {
	}
	p.Close()
}
