package cardedit

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/gpumesh/gpumesh/device"
)

// cardNodes are a card's device nodes, as paths under the dev dir
// ("nvidia0", "dri/renderD128").
type cardNodes struct {
	// own are the nodes a job on the card opens that only this card has.
	own []string
	// shared are the vendor's control nodes every card's users open.
	shared []string
	// exclusive are every node only this card has, given or not: own and
	// its DRM nodes (card and render). No other job may see one of them.
	exclusive []string
}

// nodesOf returns card c's device nodes that exist under devDir, its DRM
// nodes found through sysDir (/sys). Simulated cards have none.
func nodesOf(devDir, sysDir string, c device.Card) cardNodes {
	var n cardNodes
	if c.Backend == "sim" {
		return n
	}
	exists := func(names ...string) []string {
		var out []string
		for _, name := range names {
			if _, err := os.Stat(filepath.Join(devDir, name)); err == nil {
				out = append(out, name)
			}
		}
		return out
	}
	render, drm := drmNodes(sysDir, c.PCIBusID)
	idx := strconv.Itoa(c.Index)
	switch c.Vendor {
	case device.VendorNVIDIA:
		n.own = exists("nvidia" + idx)
		n.shared = exists("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
	case device.VendorAMD:
		n.own = exists(render...)
		n.shared = exists("kfd")
	case device.VendorHygon:
		n.own = exists(render...)
		n.shared = exists("kfd", "mkfd")
	case device.VendorHuawei:
		n.own = exists("davinci" + idx)
		n.shared = exists("davinci_manager", "devmm_svm", "hisi_hdc")
	case device.VendorMThreads:
		n.own = exists(append([]string{"mtgpu." + idx}, render...)...)
	case device.VendorKunlunxin:
		n.own = exists("xpu" + idx)
		n.shared = exists("xpuctrl")
	}
	n.exclusive = append(append([]string(nil), n.own...), drm...)
	return n
}

// DeviceNames returns the device nodes (paths under devDir, default
// "/dev") through which a job uses the given cards: each card's own nodes
// and its vendor's shared control nodes (see the package doc), those that
// exist. sysDir (default "/sys") is where a card's DRM render node is
// found from its PCI bus id. Sorted, without duplicates.
func DeviceNames(devDir, sysDir string, cards []device.Card) []string {
	if devDir == "" {
		devDir = "/dev"
	}
	if sysDir == "" {
		sysDir = "/sys"
	}
	seen := map[string]bool{}
	for _, c := range cards {
		n := nodesOf(devDir, sysDir, c)
		for _, name := range append(n.own, n.shared...) {
			seen[name] = true
		}
	}
	out := make([]string, 0, len(seen))
	for name := range seen {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// drmNodes returns the DRM nodes of the PCI device with the given bus id,
// from sysfs: its render nodes ("dri/renderD128"), and all of them (the
// render and card nodes).
func drmNodes(sysDir, busID string) (render, all []string) {
	if busID == "" {
		return nil, nil
	}
	entries, err := os.ReadDir(filepath.Join(sysDir, "bus/pci/devices", strings.ToLower(busID), "drm"))
	if err != nil {
		return nil, nil
	}
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, "renderD"):
			render = append(render, "dri/"+name)
			all = append(all, "dri/"+name)
		case strings.HasPrefix(name, "card"):
			all = append(all, "dri/"+name)
		}
	}
	return render, all
}
