package device

import (
	"fmt"
	"strings"
)

// Vendor names the maker of a card. The values are lower-case and stable: they
// travel in capacity ads and job specs.
type Vendor string

// The vendors gpumesh knows. A card from another vendor can still be reported
// by the simulated backend with any vendor string.
const (
	VendorNVIDIA    Vendor = "nvidia"
	VendorAMD       Vendor = "amd"
	VendorHygon     Vendor = "hygon"
	VendorMThreads  Vendor = "mthreads"
	VendorHuawei    Vendor = "huawei"
	VendorKunlunxin Vendor = "kunlunxin"
)

// Vendors lists the known vendors in a stable order.
func Vendors() []Vendor {
	return []Vendor{VendorNVIDIA, VendorAMD, VendorHygon, VendorMThreads, VendorHuawei, VendorKunlunxin}
}

// Card is one accelerator as gpumesh sees it, whatever its vendor.
//
// ID is the card's identity on this node and across restarts: the vendor UUID
// where the vendor has one, otherwise a stable string built from the vendor and
// the PCI bus id (or index). Model is a catalog key ("h100-sxm-80g") or, for a
// card the catalog does not know, a key derived from its name that starts with
// "x-" (see DeriveKey); Known tells which.
type Card struct {
	ID       string `json:"id"`
	Vendor   Vendor `json:"vendor"`
	Model    string `json:"model"`
	Name     string `json:"name"` // raw name as the vendor reports it
	Known    bool   `json:"known"`
	UUID     string `json:"uuid,omitempty"`
	Index    int    `json:"index"`
	PCIBusID string `json:"pci_bus_id,omitempty"` // canonical: "0000:c1:00.0"
	Backend  string `json:"backend"`              // "nvml", "amd-smi", "sim", ...

	MemoryMiB     uint64 `json:"memory_mib"`
	MemoryFreeMiB uint64 `json:"memory_free_mib"`

	// Arch is the architecture name ("hopper", "gfx942"); ComputeCapability
	// the vendor's version string where it has one ("9.0").
	Arch              string `json:"arch,omitempty"`
	ComputeCapability string `json:"compute_capability,omitempty"`
	MIG               bool   `json:"mig,omitempty"`

	// ComputeUnits is dense BF16 TFLOPS / 312 (an A100 is 1.0); 0 means unknown.
	ComputeUnits float64 `json:"compute_units"`
	// BandwidthGBs is memory bandwidth in GB/s; 0 means unknown.
	BandwidthGBs float64 `json:"bandwidth_gbs,omitempty"`

	Telemetry Telemetry `json:"telemetry"`
	Health    Health    `json:"health"`
	// Evidence is the hardware facts the backend reports (serial, board
	// part number, PCI IDs, driver, clocks); nil when it reports none.
	Evidence *Evidence `json:"evidence,omitempty"`
}

// Telemetry is a card's last sampled load. Zero values mean "not reported".
type Telemetry struct {
	UtilizationPct uint32  `json:"utilization_pct"`
	TemperatureC   uint32  `json:"temperature_c"`
	PowerW         float64 `json:"power_w"`
}

// Health says whether a card may be offered to jobs.
type Health struct {
	Healthy bool   `json:"healthy"`
	Reason  string `json:"reason,omitempty"`   // why it is unhealthy
	LastXid uint64 `json:"last_xid,omitempty"` // NVIDIA only: the Xid that made it so
}

// Healthy is the health of a card with nothing wrong.
func Healthy() Health { return Health{Healthy: true} }

// Unhealthy returns a health record with the given reason.
func Unhealthy(format string, args ...any) Health {
	return Health{Healthy: false, Reason: fmt.Sprintf(format, args...)}
}

// Simulated reports whether the card is simulated (the Sim backend, `gpumesh
// node --sim`): it has the catalog's figures and no hardware behind them.
// Its node marks it so in capacity ads, and jobs that do not allow
// simulated cards never get it.
func (c Card) Simulated() bool { return c.Backend == SimBackendName }

// MemoryGiB returns the card's memory rounded to whole GiB.
func (c Card) MemoryGiB() uint64 { return (c.MemoryMiB + 512) / 1024 }

// CanonicalBusID normalizes a PCI bus id to the lower-case
// "dddd:bb:dd.f" form. NVML reports an 8-digit upper-case domain
// ("00000000:C1:00.0"); vendor tools vary. An id that does not parse is
// returned lower-cased and trimmed.
func CanonicalBusID(id string) string {
	s := strings.ToLower(strings.TrimSpace(strings.TrimRight(id, "\x00")))
	var domain, bus, dev, fn uint64
	if n, err := fmt.Sscanf(s, "%x:%x:%x.%x", &domain, &bus, &dev, &fn); err == nil && n == 4 {
		return fmt.Sprintf("%04x:%02x:%02x.%x", domain&0xffff, bus, dev, fn)
	}
	// Some tools omit the domain: "c1:00.0".
	if n, err := fmt.Sscanf(s, "%x:%x.%x", &bus, &dev, &fn); err == nil && n == 3 {
		return fmt.Sprintf("0000:%02x:%02x.%x", bus, dev, fn)
	}
	return s
}
