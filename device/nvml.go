//go:build linux && cgo

package device

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// NVML is the part of NVIDIA's management library the NVIDIA backend uses.
// go-nvml's nvml.New() satisfies it, and so do its mocks (pkg/nvml/mock,
// pkg/nvml/mock/dgxh100, dgxh200, server), which is how the backend is tested
// without a GPU. Note that a go-nvml mock panics on a method nobody set.
type NVML interface {
	Init() nvml.Return
	Shutdown() nvml.Return
	DeviceGetCount() (int, nvml.Return)
	DeviceGetHandleByIndex(int) (nvml.Device, nvml.Return)
	EventSetCreate() (nvml.EventSet, nvml.Return)
	SystemGetDriverVersion() (string, nvml.Return)
}

var _ NVML = nvml.Interface(nil)

// NVMLBackendName is the Name of the NVIDIA backend.
const NVMLBackendName = "nvml"

// nvmlWaitTimeout bounds one wait for NVML events: how long Watch may take
// to notice its context is done.
const nvmlWaitTimeout = time.Second

// NVIDIA is the backend for NVIDIA cards, over NVML.
type NVIDIA struct {
	lib         NVML
	cat         *Catalog
	waitTimeout time.Duration
	driver      string // the driver's version, as the latest Cards read it
}

var _ Backend = (*NVIDIA)(nil)

// NewNVIDIA returns the NVIDIA backend over lib: nvml.New() for the real
// driver, a go-nvml mock in tests.
func NewNVIDIA(lib NVML, cat *Catalog) *NVIDIA {
	return &NVIDIA{lib: lib, cat: cat, waitTimeout: nvmlWaitTimeout}
}

// defaultNVIDIA is the NVIDIA backend DefaultBackends uses: the system's
// libnvidia-ml.so.1, loaded when first asked for cards.
func defaultNVIDIA(cat *Catalog) Backend { return NewNVIDIA(nvml.New(), cat) }

// Name implements Backend.
func (n *NVIDIA) Name() string { return NVMLBackendName }

// open initializes NVML. A missing library or driver means no NVIDIA cards
// here: ErrAbsent.
func (n *NVIDIA) open() error {
	switch ret := n.lib.Init(); ret {
	case nvml.SUCCESS:
		return nil
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return fmt.Errorf("%w: NVML library (libnvidia-ml.so.1) not found", ErrAbsent)
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return fmt.Errorf("%w: NVIDIA driver not loaded", ErrAbsent)
	default:
		return fmt.Errorf("nvml init: %w", ret)
	}
}

// Cards implements Backend. A card NVML cannot fully read (a lost GPU) is
// still listed, unhealthy, with the failing call as its reason.
func (n *NVIDIA) Cards(ctx context.Context) ([]Card, error) {
	if err := n.open(); err != nil {
		return nil, err
	}
	defer n.lib.Shutdown()
	count, ret := n.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvml device count: %w", ret)
	}
	if count == 0 {
		return nil, fmt.Errorf("%w: NVML lists no devices", ErrAbsent)
	}
	n.driver = ""
	if v, ret := n.lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		n.driver = strings.TrimSpace(v)
	}
	cards := make([]Card, 0, count)
	for i := range count {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		c := n.readDevice(i)
		n.cat.Resolve(&c)
		cards = append(cards, c)
	}
	return cards, nil
}

// readDevice reads one device. UUID, name and memory are required: when one
// fails the card is unhealthy. The rest is optional (consumer cards do not
// report everything), unless the GPU is lost.
func (n *NVIDIA) readDevice(i int) Card {
	c := Card{Vendor: VendorNVIDIA, Index: i, Backend: NVMLBackendName, Health: Healthy(),
		ID: fmt.Sprintf("nvidia-index-%d", i), Name: "NVIDIA GPU"}
	fail := func(call string, ret nvml.Return) {
		if c.Health.Healthy {
			c.Health = Unhealthy("nvml %s: %v", call, ret)
		}
	}
	optional := func(call string, ret nvml.Return) bool {
		if ret == nvml.ERROR_GPU_IS_LOST {
			fail(call, ret)
		}
		return ret == nvml.SUCCESS
	}
	d, ret := n.lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		fail("DeviceGetHandleByIndex", ret)
		return c
	}
	if uuid, ret := d.GetUUID(); ret == nvml.SUCCESS && uuid != "" {
		c.UUID, c.ID = uuid, uuid
	} else {
		fail("GetUUID", ret)
	}
	if name, ret := d.GetName(); ret == nvml.SUCCESS && name != "" {
		c.Name = name
	} else {
		fail("GetName", ret)
	}
	if mem, ret := d.GetMemoryInfo(); ret == nvml.SUCCESS {
		c.MemoryMiB, c.MemoryFreeMiB = mem.Total>>20, mem.Free>>20
	} else {
		fail("GetMemoryInfo", ret)
	}
	var ev Evidence
	if pci, ret := d.GetPciInfo(); optional("GetPciInfo", ret) {
		c.PCIBusID = CanonicalBusID(pciBusID(pci))
		ev.PCIDeviceID, ev.PCISubsystemID = pci.PciDeviceId, pci.PciSubSystemId
	}
	// Hardware evidence for the capacity ad (consumer cards report no
	// serial or part number).
	if s, ret := d.GetSerial(); optional("GetSerial", ret) {
		ev.Serial = strings.TrimSpace(s)
	}
	if s, ret := d.GetBoardPartNumber(); optional("GetBoardPartNumber", ret) {
		ev.BoardPartNumber = strings.TrimSpace(s)
	}
	if mhz, ret := d.GetMaxClockInfo(nvml.CLOCK_SM); optional("GetMaxClockInfo", ret) {
		ev.MaxSMClockMHz = mhz
	}
	if mhz, ret := d.GetMaxClockInfo(nvml.CLOCK_MEM); optional("GetMaxClockInfo", ret) {
		ev.MaxMemClockMHz = mhz
	}
	ev.DriverVersion = n.driver
	if !ev.IsZero() {
		c.Evidence = &ev
	}
	if major, minor, ret := d.GetCudaComputeCapability(); optional("GetCudaComputeCapability", ret) {
		c.ComputeCapability = fmt.Sprintf("%d.%d", major, minor)
		c.Arch = archFromCapability(major, minor)
	}
	if arch, ret := d.GetArchitecture(); optional("GetArchitecture", ret) {
		if name := nvmlArchName(arch); name != "" {
			c.Arch = name
		}
	}
	if mode, _, ret := d.GetMigMode(); optional("GetMigMode", ret) {
		c.MIG = mode == nvml.DEVICE_MIG_ENABLE
	}
	if u, ret := d.GetUtilizationRates(); optional("GetUtilizationRates", ret) {
		c.Telemetry.UtilizationPct = min(u.Gpu, 100)
	}
	if t, ret := d.GetTemperature(nvml.TEMPERATURE_GPU); optional("GetTemperature", ret) {
		c.Telemetry.TemperatureC = t
	}
	if mw, ret := d.GetPowerUsage(); optional("GetPowerUsage", ret) {
		c.Telemetry.PowerW = math.Round(float64(mw)/100) / 10 // W, to 0.1 W like the tool backends
	}
	return c
}

// pciBusID reads the bus id string of a PciInfo: BusId, else the legacy
// 16-byte field. Both are NUL-terminated C strings.
func pciBusID(p nvml.PciInfo) string {
	if s := cString(p.BusId[:]); s != "" {
		return s
	}
	return cString(p.BusIdLegacy[:])
}

func cString(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

func nvmlArchName(a nvml.DeviceArchitecture) string {
	switch a {
	case nvml.DEVICE_ARCH_KEPLER:
		return "kepler"
	case nvml.DEVICE_ARCH_MAXWELL:
		return "maxwell"
	case nvml.DEVICE_ARCH_PASCAL:
		return "pascal"
	case nvml.DEVICE_ARCH_VOLTA:
		return "volta"
	case nvml.DEVICE_ARCH_TURING:
		return "turing"
	case nvml.DEVICE_ARCH_AMPERE:
		return "ampere"
	case nvml.DEVICE_ARCH_ADA:
		return "ada"
	case nvml.DEVICE_ARCH_HOPPER:
		return "hopper"
	case nvml.DEVICE_ARCH_BLACKWELL:
		return "blackwell"
	}
	return ""
}

// archFromCapability names the architecture of a CUDA compute capability,
// for drivers too old to report it.
func archFromCapability(major, minor int) string {
	switch {
	case major == 7 && minor < 5:
		return "volta"
	case major == 7:
		return "turing"
	case major == 8 && minor == 9:
		return "ada"
	case major == 8:
		return "ampere"
	case major == 9:
		return "hopper"
	case major == 10 || major == 12:
		return "blackwell"
	}
	return ""
}

// errNVMLWait is returned by Watch when NVML stops delivering events.
var errNVMLWait = errors.New("nvml event wait failed")
