package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// RuntimeAuto as Config.Runtime picks crun, else runc: the first found in
// PATH that runs a container on this host.
const RuntimeAuto = "auto"

// pickRuntime finds the runtime name stands for (a path, a command in
// PATH, or RuntimeAuto) and probes it; why says why none works ("" when
// runtime does).
func pickRuntime(name, probeDir string) (runtime, why string) {
	if name == "" {
		return "", "no OCI runtime configured (gpumesh node --oci-runtime)"
	}
	names := []string{name}
	if name == RuntimeAuto {
		names = []string{"crun", "runc"}
	}
	var whys []string
	for _, n := range names {
		p, err := exec.LookPath(n)
		if err != nil {
			whys = append(whys, n+" is not installed")
			continue
		}
		if err := probeRuntime(p, probeDir); err != nil {
			whys = append(whys, fmt.Sprintf("%s does not run containers here (%v)", p, err))
			continue
		}
		return p, ""
	}
	return "", "no working OCI runtime: " + strings.Join(whys, "; ") + " (install crun or runc: apt install crun)"
}

// probeRuntime runs a container that does nothing (true, from the node's
// own /usr, read-only) to find out whether runtime works on this host:
// crun refuses hosts whose cgroup v2 hierarchy holds controllers beside
// v1 ones, for instance. dir is removed after.
func probeRuntime(runtime, dir string) error {
	_ = os.RemoveAll(dir)
	defer os.RemoveAll(dir)
	rootfs := filepath.Join(dir, "rootfs")
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		return err
	}
	var mounts []specs.Mount
	for _, d := range []string{"/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32"} {
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
			continue
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(d)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, filepath.Join(rootfs, d)); err != nil {
				return err
			}
		case fi.IsDir():
			mounts = append(mounts, specs.Mount{Destination: d, Type: "bind", Source: d, Options: []string{"rbind", "ro"}})
		}
	}
	mounts = append(mounts, specs.Mount{Destination: "/proc", Type: "proc", Source: "proc"})
	spec := specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{Args: []string{"true"}, Env: []string{"PATH=/usr/bin:/bin"}, Cwd: "/", NoNewPrivileges: true},
		Root:    &specs.Root{Path: rootfs, Readonly: true},
		Mounts:  mounts,
		Linux: &specs.Linux{Namespaces: []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.MountNamespace},
			{Type: specs.IPCNamespace}, {Type: specs.NetworkNamespace}}},
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	state := filepath.Join(dir, "state")
	id := "gpumesh-probe-" + strconv.Itoa(os.Getpid())
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, runtime, "--root", state, "run", "--bundle", dir, id)
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	_ = exec.Command(runtime, "--root", state, "delete", "--force", id).Run()
	if err != nil {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(lastLine(out.String())))
	}
	return nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
