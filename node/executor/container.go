package executor

import (
	"errors"
	"fmt"
	"path"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpumesh/gpumesh/node/cardedit"
)

// Container is how an attempt runs in an OCI image: the image's root file
// system, which attempts share and never write (each gets a writable
// layer of its own over it, removed when it ends), and the process the
// image makes of the job's command (node/image's Process).
type Container struct {
	// Rootfs is the image's unpacked root file system, owned by ids of the
	// range Config.ContainerIDBase maps.
	Rootfs string
	// Args is the process's argv, looked up in the image's PATH.
	Args []string
	// Env is the image's environment (NAME=VALUE); the job's variables,
	// its devices' and gpumesh's go over it.
	Env []string
	// Cwd is the working directory inside the image.
	Cwd string
	// UID, GID and Groups are the user inside the image (0-65535).
	UID, GID uint32
	Groups   []uint32

	// Cards are the edits through which the container uses its cards
	// (node/cardedit: the supplier's CDI specs or the vendor's built-in
	// rules); nil for none. Their devices join those of Limits.Devices,
	// each made afresh in the container's /dev after the node's node,
	// owned by the image's user and allowed by the container's device
	// cgroup; their mounts are bound read-only, nosuid and nodev; their
	// variables go over the image's and the job's own, under DeviceEnv
	// and gpumesh's; their groups join Groups; their OCI hooks are run by
	// the runtime (createContainer hooks as the container's root).
	Cards *cardedit.Edits
}

// maxContainerMounts bounds the cards' mounts (a driver has a few hundred
// files at most).
const maxContainerMounts = 4096

// ErrNoRuntime is matched by Start's error for an image attempt on an
// executor without an OCI runtime (Capabilities.Runtime is "").
var ErrNoRuntime = errors.New("executor: this node runs no images")

// Paths inside an image attempt's container.
const (
	containerWorkDir       = "/gpumesh/work"
	containerCheckpointDir = "/gpumesh/checkpoint"
	containerTmpDir        = "/tmp"
	defaultContainerPath   = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

func (c *Container) validate() error {
	switch {
	case c.Rootfs == "" || !path.IsAbs(c.Rootfs):
		return fmt.Errorf("executor: image root file system %q: want an absolute path", c.Rootfs)
	case len(c.Args) == 0 || c.Args[0] == "":
		return errors.New("executor: the image's command is empty")
	case len(c.Args) > maxCommandArgs:
		return fmt.Errorf("executor: command has %d arguments, at most %d", len(c.Args), maxCommandArgs)
	case !path.IsAbs(c.Cwd):
		return fmt.Errorf("executor: image working directory %q: want an absolute path", c.Cwd)
	case c.UID > 65535 || c.GID > 65535:
		return fmt.Errorf("executor: image user %d:%d: ids go up to 65535", c.UID, c.GID)
	}
	for _, e := range c.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" || strings.ContainsRune(e, 0) {
			return fmt.Errorf("executor: image environment entry %q: want NAME=VALUE", e)
		}
	}
	if c.Cards != nil {
		return validateCards(c.Cards)
	}
	return nil
}

// validateCards checks the cards' edits of a container.
func validateCards(e *cardedit.Edits) error {
	for _, kv := range e.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" || strings.ContainsRune(kv, 0) {
			return fmt.Errorf("executor: the cards' environment entry %q: want NAME=VALUE", kv)
		}
	}
	if len(e.Devices) > maxDevices || len(e.Mounts) > maxContainerMounts {
		return fmt.Errorf("executor: the cards' %d devices and %d mounts, at most %d and %d", len(e.Devices), len(e.Mounts), maxDevices, maxContainerMounts)
	}
	for _, d := range e.Devices {
		name := strings.TrimPrefix(d.Path, "/dev/")
		if !cleanAbs(d.Path) || !cleanAbs(d.Host) || name == d.Path || isStandardDevice(name) || name == "mqueue" || strings.HasPrefix(name, "mqueue/") {
			return fmt.Errorf("executor: the cards' device %s (from %s): want a clean path under /dev other than the standard nodes, from an absolute one", d.Path, d.Host)
		}
	}
	for _, m := range e.Mounts {
		if !cleanAbs(m.Path) || !cleanAbs(m.Host) || m.Path == "/" {
			return fmt.Errorf("executor: the cards' mount %s at %s: want clean absolute paths, not /", m.Host, m.Path)
		}
		for _, own := range []string{"/proc", "/dev", "/sys", "/gpumesh", containerTmpDir} {
			if m.Path == own || strings.HasPrefix(m.Path, own+"/") {
				return fmt.Errorf("executor: the cards' mount at %s: %s is the container's own", m.Path, own)
			}
		}
	}
	if h := e.Hooks; h != nil {
		for _, list := range [][]specs.Hook{h.Prestart, h.CreateRuntime, h.CreateContainer, h.StartContainer, h.Poststart, h.Poststop} {
			for _, hk := range list {
				if !cleanAbs(hk.Path) {
					return fmt.Errorf("executor: OCI hook %q: want an absolute path", hk.Path)
				}
			}
		}
	}
	return nil
}

// cleanAbs tells whether p is an absolute path in its clean form.
func cleanAbs(p string) bool {
	return path.IsAbs(p) && path.Clean(p) == p && !strings.ContainsRune(p, 0)
}

// containerEnv is an image attempt's environment: the image's, the job's
// own, its cards' edits', its devices' visibility, then gpumesh's (with the paths the job sees inside
// its container), which the job cannot override. HOME is the image's, or
// the work directory; PATH the image's, or the usual default.
func (r *Run) containerEnv() map[string]string {
	a := r.attempt
	env := map[string]string{"PATH": defaultContainerPath, "HOME": containerWorkDir}
	for _, e := range a.Image.Env {
		k, v, _ := strings.Cut(e, "=")
		env[k] = v
	}
	privateEnv(env, a.Private)
	for k, v := range a.Env {
		env[k] = v
	}
	if c := a.Image.Cards; c != nil {
		for _, e := range c.Env {
			k, v, _ := strings.Cut(e, "=")
			env[k] = v
		}
	}
	for k, v := range a.DeviceEnv {
		env[k] = v
	}
	gpumeshEnv(env, a, containerTmpDir, containerWorkDir, containerCheckpointDir)
	return env
}
