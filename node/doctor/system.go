package doctor

import (
	"context"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"runtime"

	ma "github.com/multiformats/go-multiaddr"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/internal/portuse"
	"github.com/gpumesh/gpumesh/mesh"
	"github.com/gpumesh/gpumesh/node/cardedit"
)

// System is what the checks read of the machine. Every method only reads
// (CheckPort binds a socket and closes it at once); calls come from one
// goroutine.
type System interface {
	// GOOS is the operating system, as runtime.GOOS.
	GOOS() string
	// Geteuid is the effective user ID (-1 on Windows).
	Geteuid() int
	ReadFile(name string) ([]byte, error)
	ReadDir(name string) ([]fs.DirEntry, error)
	// LookPath finds a program on $PATH, as exec.LookPath.
	LookPath(file string) (string, error)
	// FreeBytes is the space left to an unprivileged user on the file
	// system holding path.
	FreeBytes(path string) (uint64, error)
	// CheckPort is portuse.Check: a *portuse.BusyError when another
	// socket holds addr's port.
	CheckPort(network, addr string) error
	// InterfaceIPs are the addresses of this machine's interfaces.
	InterfaceIPs() ([]net.IP, error)
}

// Config is what Run checks.
type Config struct {
	// System reads the machine; default OS().
	System System
	// DataDir is the node's data dir (required for the disk checks).
	DataDir string
	// CheckDataDir says why DataDir cannot be the data dir (datadir.Check);
	// nil: not checked.
	CheckDataDir func(dir string) error
	// ListenAddrs are the node's listen addresses (default: the mesh's).
	ListenAddrs []ma.Multiaddr
	// Cards lists the cards and what each backend found; default: every
	// backend gpumesh knows (device.DefaultBackends).
	Cards func(context.Context) ([]device.Card, []device.BackendStatus, error)
	// Probe asks the mesh where this machine stands; nil: not checked
	// (gpumesh doctor without --join). It is given the listen addresses
	// the probe may listen on (none free: ports 0).
	Probe func(ctx context.Context, listen []ma.Multiaddr) (mesh.ProbeResult, error)
	// CardPaths says how each vendor of the cards enters containers
	// (node/cardedit's Editor.Paths: through CDI or by the built-in
	// rules, and why); nil: not said.
	CardPaths func([]device.Card) []cardedit.Path
	// MinFreeBytes is the free space under which the data dir check
	// fails; WarnFreeBytes under which it warns. Defaults 2 GiB, 20 GiB.
	MinFreeBytes, WarnFreeBytes uint64
}

func (c Config) withDefaults() Config {
	if c.System == nil {
		c.System = OS()
	}
	if len(c.ListenAddrs) == 0 {
		c.ListenAddrs = []ma.Multiaddr{
			ma.StringCast("/ip4/0.0.0.0/tcp/4747"),
			ma.StringCast("/ip4/0.0.0.0/udp/4747/quic-v1"),
		}
	}
	if c.Cards == nil {
		c.Cards = func(ctx context.Context) ([]device.Card, []device.BackendStatus, error) {
			cat := device.DefaultCatalog()
			return device.Discover(ctx, device.Config{Backends: device.DefaultBackends(device.ExecRunner{}, cat)})
		}
	}
	if c.MinFreeBytes == 0 {
		c.MinFreeBytes = 2 << 30
	}
	if c.WarnFreeBytes == 0 {
		c.WarnFreeBytes = 20 << 30
	}
	return c
}

// OS is the real machine.
func OS() System { return osSystem{} }

type osSystem struct{}

func (osSystem) GOOS() string                               { return runtime.GOOS }
func (osSystem) ReadFile(name string) ([]byte, error)       { return os.ReadFile(name) }
func (osSystem) ReadDir(name string) ([]fs.DirEntry, error) { return os.ReadDir(name) }
func (osSystem) LookPath(file string) (string, error)       { return exec.LookPath(file) }
func (osSystem) FreeBytes(path string) (uint64, error)      { return freeBytes(path) }
func (osSystem) CheckPort(network, addr string) error       { return portuse.Check(network, addr) }

func (osSystem) Geteuid() int {
	if runtime.GOOS == "windows" {
		return -1
	}
	return os.Geteuid()
}

func (osSystem) InterfaceIPs() ([]net.IP, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var out []net.IP
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			out = append(out, n.IP)
		}
	}
	return out, nil
}
