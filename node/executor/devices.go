package executor

import (
	"strings"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/node/cardedit"
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
// Limits.Devices) through which a job uses the given cards, keeping those
// that exist under devDir (default "/dev"): each card's own nodes and its
// vendor's control nodes, as node/cardedit's DeviceNames lists them
// (NVIDIA: nvidia<index>, nvidiactl, nvidia-uvm, nvidia-uvm-tools,
// nvidia-modeset — not nvidia-caps/*, which grant MIG management or one
// MIG slice each; AMD: kfd and the card's DRM render node, Hygon also
// mkfd; Ascend: davinci<index>, davinci_manager, devmm_svm, hisi_hdc;
// Moore Threads: mtgpu.<index> and the render node; Kunlunxin: xpu<index>
// and xpuctrl). Simulated cards have no nodes. Sorted, without
// duplicates.
func CardDevices(devDir string, cards []device.Card) []string {
	return cardedit.DeviceNames(devDir, "", cards)
}
