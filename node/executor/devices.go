package executor

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/gpumesh/gpumesh/device"
)

// stdDevice is a device node every sandbox has: its name under /dev and
// its fixed Linux character device number.
type stdDevice struct {
	name         string
	major, minor uint32
}

// standardDevices are the character devices of a sandbox's /dev besides its
// cards: the ones every program expects. ptmx is a link into the sandbox's
// own devpts instance.
var standardDevices = [...]stdDevice{
	{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0},
}

// isStandardDevice tells whether a name under /dev is one the sandbox makes
// itself.
func isStandardDevice(name string) bool {
	for _, d := range standardDevices {
		if d.name == name {
			return true
		}
	}
	switch name {
	case "ptmx", "pts", "shm", "fd", "stdin", "stdout", "stderr":
		return true
	}
	return strings.HasPrefix(name, "pts/") || strings.HasPrefix(name, "shm/")
}

// CardDevices returns the device nodes (paths under /dev, for
// Limits.Devices) through which a job uses the given cards, as far as the
// vendor's layout is known, keeping those that exist under devDir (default
// "/dev"). Per vendor:
//
//   - NVIDIA: nvidia<index> plus the control nodes nvidiactl, nvidia-uvm,
//     nvidia-uvm-tools and nvidia-modeset. Not nvidia-caps/*: those grant
//     MIG management (config, monitor) or one MIG slice each, which the node
//     must decide slice by slice;
//   - AMD and Hygon: kfd plus the card's DRM render node, found through
//     /sys/bus/pci/devices/<bus id>/drm;
//   - Huawei Ascend: davinci<index> plus davinci_manager, devmm_svm, hisi_hdc;
//   - Moore Threads: mtgpu.<index> and the card's DRM render node;
//   - Kunlunxin: xpu<index> plus xpuctrl.
//
// Simulated cards have no nodes. The result is sorted and without
// duplicates.
func CardDevices(devDir string, cards []device.Card) []string {
	if devDir == "" {
		devDir = "/dev"
	}
	seen := map[string]bool{}
	add := func(names ...string) {
		for _, n := range names {
			if _, err := os.Stat(filepath.Join(devDir, n)); err == nil {
				seen[n] = true
			}
		}
	}
	for _, c := range cards {
		if c.Backend == "sim" {
			continue
		}
		idx := strconv.Itoa(c.Index)
		switch c.Vendor {
		case device.VendorNVIDIA:
			add("nvidia"+idx, "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
		case device.VendorAMD, device.VendorHygon:
			add("kfd")
			add(renderNodes(c.PCIBusID)...)
		case device.VendorHuawei:
			add("davinci"+idx, "davinci_manager", "devmm_svm", "hisi_hdc")
		case device.VendorMThreads:
			add("mtgpu." + idx)
			add(renderNodes(c.PCIBusID)...)
		case device.VendorKunlunxin:
			add("xpu"+idx, "xpuctrl")
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// renderNodes returns the DRM render nodes ("dri/renderD128") of the PCI
// device with the given bus id, from sysfs.
func renderNodes(busID string) []string {
	if busID == "" {
		return nil
	}
	entries, err := os.ReadDir(filepath.Join("/sys/bus/pci/devices", strings.ToLower(busID), "drm"))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "renderD") {
			out = append(out, "dri/"+e.Name())
		}
	}
	return out
}
