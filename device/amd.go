package device

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// AMD Instinct cards are read with amd-smi, or with rocm-smi where amd-smi is
// not installed (see rocmsmi.go).
//
// amd-smi's JSON output is documented in the AMD SMI CLI guide
// (https://rocm.docs.amd.com/projects/amdsmi/en/latest/how-to/amdsmi-cli-tool.html).
// Releases up to ROCm 6.3 print a list of per-GPU objects; later ones wrap
// the same objects as {"gpu_data": [...]}. Both are read. The fields used:
//
//	amd-smi static --json  gpu, asic.market_name, asic.target_graphics_version,
//	                       bus.bdf, board.product_name, vram.size
//	amd-smi list --json    gpu, bdf, uuid
//	amd-smi metric --json  gpu, usage.gfx_activity, power.socket_power,
//	                       temperature.hotspot|edge, mem_usage.total_vram|free_vram
//
// Sizes come as numbers, "196592 MB" strings or {"value", "unit"} objects.

var (
	amdStaticArgs = []string{"static", "--json"}
	amdListArgs   = []string{"list", "--json"}
	amdMetricArgs = []string{"metric", "--json"}
)

// NewAMD returns the backend for AMD cards. It runs amd-smi, or rocm-smi
// where amd-smi is missing, through r.
func NewAMD(r Runner, cat *Catalog) Backend {
	return &toolBackend{
		name: "amd", vendor: VendorAMD, runner: r, cat: cat,
		sources: []toolSource{
			{tool: "amd-smi", read: readAMDSMI},
			{tool: "rocm-smi", read: rocmSMISource("rocm-smi", "")},
		},
	}
}

// readAMDSMI runs amd-smi static, then list and metric for the UUID and
// telemetry; those two are optional (a card without them is still usable).
func readAMDSMI(ctx context.Context, r Runner) ([]Card, error) {
	out, err := runTool(ctx, r, "amd-smi", amdStaticArgs...)
	if err != nil {
		return nil, err
	}
	cards, err := parseAMDSMIStatic(out)
	if err != nil {
		return nil, parseErr("amd-smi", amdStaticArgs, err)
	}
	if out, err := runTool(ctx, r, "amd-smi", amdListArgs...); err == nil {
		if list, err := parseAMDSMIList(out); err == nil {
			for i := range cards {
				if l, ok := list[cards[i].Index]; ok {
					cards[i].UUID = l.UUID
					if cards[i].PCIBusID == "" {
						cards[i].PCIBusID = l.PCIBusID
					}
				}
			}
		}
	}
	if out, err := runTool(ctx, r, "amd-smi", amdMetricArgs...); err == nil {
		if metrics, err := parseAMDSMIMetric(out); err == nil {
			for i := range cards {
				if m, ok := metrics[cards[i].Index]; ok {
					cards[i].Telemetry = m.Telemetry
					cards[i].MemoryFreeMiB = m.MemoryFreeMiB
				}
			}
		}
	}
	return cards, nil
}

// amdGPUObjects accepts both shapes of amd-smi JSON: a list of per-GPU
// objects, or {"gpu_data": [...]}.
func amdGPUObjects(data []byte) ([]map[string]any, error) {
	var v any
	if err := decodeToolJSON(data, &v); err != nil {
		return nil, err
	}
	if obj, ok := v.(map[string]any); ok {
		inner, ok := obj["gpu_data"]
		if !ok {
			return nil, fmt.Errorf("an object without \"gpu_data\"")
		}
		v = inner
	}
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("want a list of GPUs or {\"gpu_data\": [...]}")
	}
	out := make([]map[string]any, 0, len(list))
	for i, item := range list {
		obj, ok := item.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("GPU entry %d is not an object", i)
		}
		out = append(out, obj)
	}
	return out, nil
}

// amdIndex reads the "gpu" field of an amd-smi entry.
func amdIndex(obj map[string]any, pos int) (int, error) {
	v, present := obj["gpu"]
	if !present {
		return pos, nil
	}
	n, _, ok := quantity(v)
	if !ok || n != math.Trunc(n) || n > 1<<16 {
		return 0, fmt.Errorf("GPU entry %d: bad \"gpu\" index %v", pos, v)
	}
	return int(n), nil
}

func asObject(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// parseAMDSMIStatic reads `amd-smi static --json`.
func parseAMDSMIStatic(data []byte) ([]Card, error) {
	objs, err := amdGPUObjects(data)
	if err != nil {
		return nil, err
	}
	cards := make([]Card, 0, len(objs))
	seen := map[int]bool{}
	for pos, o := range objs {
		idx, err := amdIndex(o, pos)
		if err != nil {
			return nil, err
		}
		if seen[idx] {
			return nil, fmt.Errorf("GPU %d listed twice", idx)
		}
		seen[idx] = true
		asic, board := asObject(o["asic"]), asObject(o["board"])
		name := text(asic["market_name"])
		if name == "" {
			name = text(board["product_name"])
		}
		if name == "" {
			return nil, fmt.Errorf("GPU %d: no asic.market_name or board.product_name", idx)
		}
		n, unit, ok := quantity(asObject(o["vram"])["size"])
		mem, okUnit := toMiB(n, unit, "MB")
		if !ok || !okUnit || mem == 0 {
			return nil, fmt.Errorf("GPU %d: no usable vram.size", idx)
		}
		cards = append(cards, Card{
			Vendor:        VendorAMD,
			Name:          name,
			Index:         idx,
			PCIBusID:      text(asObject(o["bus"])["bdf"]),
			MemoryMiB:     mem,
			MemoryFreeMiB: mem,
			Arch:          text(asic["target_graphics_version"]),
			Evidence:      amdEvidence(asic, board),
		})
	}
	return cards, nil
}

// amdEvidence is the hardware evidence in amd-smi static's asic and board
// sections: the board's serial (else the ASIC's), its model number, and
// the PCI device, vendor and subsystem vendor IDs in NVML's form (device
// ID above the vendor ID); nil when it has none.
func amdEvidence(asic, board map[string]any) *Evidence {
	known := func(s string) string {
		if s == "N/A" || s == "n/a" {
			return ""
		}
		return s
	}
	hex := func(s string) uint32 {
		v, err := strconv.ParseUint(strings.TrimPrefix(strings.ToLower(known(s)), "0x"), 16, 16)
		if err != nil {
			return 0
		}
		return uint32(v)
	}
	e := Evidence{Serial: known(text(board["product_serial"])), BoardPartNumber: known(text(board["model_number"]))}
	if e.Serial == "" {
		e.Serial = known(text(asic["asic_serial"]))
	}
	if dev, vendor := hex(text(asic["device_id"])), hex(text(asic["vendor_id"])); dev != 0 && vendor != 0 {
		e.PCIDeviceID = dev<<16 | vendor
	}
	e.PCISubsystemID = hex(text(asic["subvendor_id"]))
	if e.IsZero() {
		return nil
	}
	return &e
}

// amdListEntry is what `amd-smi list --json` says of one GPU.
type amdListEntry struct{ UUID, PCIBusID string }

// parseAMDSMIList reads `amd-smi list --json`, keyed by GPU index.
func parseAMDSMIList(data []byte) (map[int]amdListEntry, error) {
	objs, err := amdGPUObjects(data)
	if err != nil {
		return nil, err
	}
	out := map[int]amdListEntry{}
	for pos, o := range objs {
		idx, err := amdIndex(o, pos)
		if err != nil {
			return nil, err
		}
		out[idx] = amdListEntry{UUID: text(o["uuid"]), PCIBusID: text(o["bdf"])}
	}
	return out, nil
}

// amdMetric is what `amd-smi metric --json` says of one GPU.
type amdMetric struct {
	Telemetry     Telemetry
	MemoryFreeMiB uint64
}

// parseAMDSMIMetric reads `amd-smi metric --json`, keyed by GPU index.
func parseAMDSMIMetric(data []byte) (map[int]amdMetric, error) {
	objs, err := amdGPUObjects(data)
	if err != nil {
		return nil, err
	}
	out := map[int]amdMetric{}
	for pos, o := range objs {
		idx, err := amdIndex(o, pos)
		if err != nil {
			return nil, err
		}
		var m amdMetric
		m.Telemetry.UtilizationPct = percent(asObject(o["usage"])["gfx_activity"])
		m.Telemetry.PowerW = watts(asObject(o["power"])["socket_power"])
		temp := asObject(o["temperature"])
		if t := celsius(temp["hotspot"]); t > 0 {
			m.Telemetry.TemperatureC = t
		} else {
			m.Telemetry.TemperatureC = celsius(temp["edge"])
		}
		mem := asObject(o["mem_usage"])
		if n, unit, ok := quantity(mem["free_vram"]); ok {
			m.MemoryFreeMiB, _ = toMiB(n, unit, "MB")
		} else if tn, tu, ok := quantity(mem["total_vram"]); ok {
			if un, uu, ok := quantity(mem["used_vram"]); ok {
				total, _ := toMiB(tn, tu, "MB")
				used, _ := toMiB(un, uu, "MB")
				if used <= total {
					m.MemoryFreeMiB = total - used
				}
			}
		}
		out[idx] = m
	}
	return out, nil
}
