package cardedit

import (
	"fmt"
	"path"
	"sort"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpumesh/gpumesh/device"
)

// Device is a device node the container gets.
type Device struct {
	// Path is where the container sees it: "/dev/nvidia0".
	Path string `json:"path"`
	// Host is the node's device node it is made after (its type and
	// number): "/dev/nvidia0".
	Host string `json:"host"`
}

// Mount is a file or directory of the node bound read-only into the
// container.
type Mount struct {
	// Host is the file or directory on the node, symbolic links resolved.
	Host string `json:"host"`
	// Path is where the container sees it.
	Path string `json:"path"`
}

// Via is how a vendor's cards enter a container.
type Via string

// The ways in.
const (
	ViaCDI     Via = "cdi"      // the supplier's CDI specs
	ViaBuiltin Via = "built-in" // gpumesh's own rules for the vendor
)

// Path says how one vendor's cards enter containers on this node.
type Path struct {
	Vendor device.Vendor `json:"vendor"`
	Via    Via           `json:"via"`
	// Detail is, through CDI, the devices and the spec files they come
	// from; built-in, why not through CDI.
	Detail string `json:"detail"`
}

// Edits are what a container needs to use its cards.
type Edits struct {
	// Devices are the device nodes, sorted by Path.
	Devices []Device
	// Mounts are the driver's files and directories, sorted by Path.
	Mounts []Mount
	// Env are variables (NAME=VALUE, sorted) that go over the image's and
	// the job's own.
	Env []string
	// Hooks are the OCI hooks CDI specs ask for; nil without.
	Hooks *specs.Hooks
	// Groups are supplementary group ids CDI specs ask for.
	Groups []uint32
	// Paths say, per vendor of the job's cards, how they entered.
	Paths []Path
}

// add merges o into e: a device or mount at a path already taken must be
// the same, variables of o win, hooks and groups add up.
func (e *Edits) add(o *Edits) error {
	for _, d := range o.Devices {
		if i := indexOf(e.Devices, func(x Device) bool { return x.Path == d.Path }); i >= 0 {
			if e.Devices[i].Host != d.Host {
				return fmt.Errorf("cardedit: %s is both %s and %s", d.Path, e.Devices[i].Host, d.Host)
			}
			continue
		}
		e.Devices = append(e.Devices, d)
	}
	for _, m := range o.Mounts {
		if i := indexOf(e.Mounts, func(x Mount) bool { return x.Path == m.Path }); i >= 0 {
			if e.Mounts[i].Host != m.Host {
				return fmt.Errorf("cardedit: %s in the container is both %s and %s", m.Path, e.Mounts[i].Host, m.Host)
			}
			continue
		}
		e.Mounts = append(e.Mounts, m)
	}
	e.Env = mergeEnv(e.Env, o.Env)
	if o.Hooks != nil {
		if e.Hooks == nil {
			e.Hooks = &specs.Hooks{}
		}
		e.Hooks.Prestart = append(e.Hooks.Prestart, o.Hooks.Prestart...) // deprecated in OCI, still run by runc and crun
		e.Hooks.CreateRuntime = append(e.Hooks.CreateRuntime, o.Hooks.CreateRuntime...)
		e.Hooks.CreateContainer = append(e.Hooks.CreateContainer, o.Hooks.CreateContainer...)
		e.Hooks.StartContainer = append(e.Hooks.StartContainer, o.Hooks.StartContainer...)
		e.Hooks.Poststart = append(e.Hooks.Poststart, o.Hooks.Poststart...)
		e.Hooks.Poststop = append(e.Hooks.Poststop, o.Hooks.Poststop...)
	}
	for _, g := range o.Groups {
		if indexOf(e.Groups, func(x uint32) bool { return x == g }) < 0 {
			e.Groups = append(e.Groups, g)
		}
	}
	e.Paths = append(e.Paths, o.Paths...)
	return nil
}

// sort puts devices, mounts and variables in their documented order.
func (e *Edits) sort() {
	sort.Slice(e.Devices, func(i, j int) bool { return e.Devices[i].Path < e.Devices[j].Path })
	sort.Slice(e.Mounts, func(i, j int) bool { return e.Mounts[i].Path < e.Mounts[j].Path })
	sort.Strings(e.Env)
}

func indexOf[T any](s []T, f func(T) bool) int {
	for i, x := range s {
		if f(x) {
			return i
		}
	}
	return -1
}

// mergeEnv returns env with the variables of over set (NAME=VALUE each).
func mergeEnv(env, over []string) []string {
	for _, kv := range over {
		k, _, _ := strings.Cut(kv, "=")
		i := indexOf(env, func(x string) bool { return strings.HasPrefix(x, k+"=") })
		if i >= 0 {
			env[i] = kv
		} else {
			env = append(env, kv)
		}
	}
	return env
}

// envMap reads NAME=VALUE entries; later ones win.
func envMap(env []string) map[string]string {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

// prependDir returns the list (a PATH-like value, ':'-separated) with dir
// first, unless the list already names it.
func prependDir(list, dir string) string {
	for _, d := range strings.Split(list, ":") {
		if path.Clean(d) == dir {
			return list
		}
	}
	if list == "" {
		return dir
	}
	return dir + ":" + list
}
