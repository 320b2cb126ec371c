package device

import (
	"sort"
	"strconv"
	"strings"
)

// The environment variables through which each vendor's runtime learns which
// cards a process may use.
const (
	EnvCUDAVisible   = "CUDA_VISIBLE_DEVICES" // NVIDIA: UUIDs, see EnvCUDAOrder
	EnvCUDAOrder     = "CUDA_DEVICE_ORDER"    // set to PCI_BUS_ID so indices match nvidia-smi
	EnvROCRVisible   = "ROCR_VISIBLE_DEVICES" // AMD (ROCm runtime)
	EnvHIPVisible    = "HIP_VISIBLE_DEVICES"  // Hygon DCU (HIP on DTK)
	EnvAscendVisible = "ASCEND_RT_VISIBLE_DEVICES"
	EnvMUSAVisible   = "MUSA_VISIBLE_DEVICES" // Moore Threads
	EnvXPUVisible    = "XPU_VISIBLE_DEVICES"  // Kunlunxin
)

// NoDevices is the value given to a vendor's variable when the job gets none
// of that vendor's cards: an index no device has, which the CUDA and HIP
// runtimes read as "nothing visible".
const NoDevices = "-1"

// visibleVar returns the variable that selects cards of vendor v, or "" for
// a vendor gpumesh has no variable for.
func visibleVar(v Vendor) string {
	switch v {
	case VendorNVIDIA:
		return EnvCUDAVisible
	case VendorAMD:
		return EnvROCRVisible
	case VendorHygon:
		return EnvHIPVisible
	case VendorHuawei:
		return EnvAscendVisible
	case VendorMThreads:
		return EnvMUSAVisible
	case VendorKunlunxin:
		return EnvXPUVisible
	}
	return ""
}

// VisibleEnv returns the environment ("KEY=VALUE", sorted) a job needs to see
// exactly the given cards: for each vendor, its variable listing the job's
// cards — NVIDIA cards by UUID (with CUDA_DEVICE_ORDER=PCI_BUS_ID), others by
// index, the order their runtime enumerates them. Simulated cards get their
// vendor's variable like real ones.
//
// inventory is every card on the node (may be nil): a vendor present there
// but absent from cards gets NoDevices, so the job cannot reach cards it was
// not given. Cards of a vendor with no known variable are left out.
func VisibleEnv(cards, inventory []Card) []string {
	lists := map[string][]string{}
	for _, c := range inventory {
		if name := visibleVar(c.Vendor); name != "" {
			if _, ok := lists[name]; !ok {
				lists[name] = nil
			}
		}
	}
	seen := map[string]bool{}
	for _, c := range cards {
		name := visibleVar(c.Vendor)
		if name == "" || seen[c.ID] {
			continue
		}
		seen[c.ID] = true
		ref := strconv.Itoa(c.Index)
		if c.Vendor == VendorNVIDIA && c.UUID != "" {
			ref = c.UUID
		}
		lists[name] = append(lists[name], ref)
	}
	var env []string
	for name, refs := range lists {
		value := NoDevices
		if len(refs) > 0 {
			value = strings.Join(refs, ",")
		}
		env = append(env, name+"="+value)
		if name == EnvCUDAVisible {
			env = append(env, EnvCUDAOrder+"=PCI_BUS_ID")
		}
	}
	sort.Strings(env)
	return env
}
