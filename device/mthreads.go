package device

import (
	"context"
	"fmt"
	"math"
)

// Moore Threads cards are read with `mthreads-gmi -q --json`, the JSON form
// of the full query (Moore Threads' mthreads-gmi user guide, MUSA SDK docs at
// https://docs.mthreads.com). It mirrors nvidia-smi -q:
//
//	{"Driver Version": "2.7.0", "Attached GPUs": "8",
//	 "GPU": [{"Index": "0", "Product Name": "MTT S4000", "GPU UUID": "...",
//	          "PCI": {"Bus Id": "00000000:1B:00.0"},
//	          "FB Memory Usage": {"Total": "49152MiB", "Used": "0MiB", "Free": "49152MiB"},
//	          "Utilization": {"Gpu": "0%"},
//	          "Temperature": {"GPU Current Temp": "35C"},
//	          "Power Readings": {"Power Draw ": "80.00W"}}, ...]}
//
// Keys are matched ignoring case and surrounding spaces (some releases print
// "Power Draw " with a trailing space); a single GPU may come as an object
// instead of a one-element list.

var mthreadsArgs = []string{"-q", "--json"}

// NewMThreads returns the backend for Moore Threads cards. It runs
// mthreads-gmi through r.
func NewMThreads(r Runner, cat *Catalog) Backend {
	return &toolBackend{
		name: "mthreads", vendor: VendorMThreads, runner: r, cat: cat,
		sources: []toolSource{{tool: "mthreads-gmi", read: func(ctx context.Context, r Runner) ([]Card, error) {
			out, err := runTool(ctx, r, "mthreads-gmi", mthreadsArgs...)
			if err != nil {
				return nil, err
			}
			cards, err := parseMThreadsGMI(out)
			if err != nil {
				return nil, parseErr("mthreads-gmi", mthreadsArgs, err)
			}
			return cards, nil
		}}},
	}
}

// parseMThreadsGMI reads `mthreads-gmi -q --json`.
func parseMThreadsGMI(data []byte) ([]Card, error) {
	var top map[string]any
	if err := decodeToolJSON(data, &top); err != nil {
		return nil, err
	}
	var gpus []any
	switch g := lookup(top, "GPU").(type) {
	case []any:
		gpus = g
	case map[string]any:
		gpus = []any{g}
	case nil:
		return nil, nil // no GPU section: no cards
	default:
		return nil, fmt.Errorf("\"GPU\" is neither a list nor an object")
	}
	cards := make([]Card, 0, len(gpus))
	seen := map[int]bool{}
	for pos, item := range gpus {
		g, ok := item.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("GPU entry %d is not an object", pos)
		}
		c := Card{Vendor: VendorMThreads, Index: pos}
		if v := lookup(g, "Index"); v != nil {
			n, _, ok := quantity(v)
			if !ok || n != math.Trunc(n) || n > 1<<16 {
				return nil, fmt.Errorf("GPU entry %d: bad Index %v", pos, v)
			}
			c.Index = int(n)
		}
		if seen[c.Index] {
			return nil, fmt.Errorf("GPU %d listed twice", c.Index)
		}
		seen[c.Index] = true
		if c.Name = text(lookup(g, "Product Name")); c.Name == "" {
			return nil, fmt.Errorf("GPU %d: no Product Name", c.Index)
		}
		mem := asObject(lookup(g, "FB Memory Usage"))
		n, unit, ok := quantity(lookup(mem, "Total"))
		total, okUnit := toMiB(n, unit, "MiB")
		if !ok || !okUnit || total == 0 {
			return nil, fmt.Errorf("GPU %d: no usable FB Memory Usage.Total", c.Index)
		}
		c.MemoryMiB, c.MemoryFreeMiB = total, total
		if n, unit, ok := quantity(lookup(mem, "Free")); ok {
			if free, ok := toMiB(n, unit, "MiB"); ok {
				c.MemoryFreeMiB = min(free, total)
			}
		} else if n, unit, ok := quantity(lookup(mem, "Used")); ok {
			if used, _ := toMiB(n, unit, "MiB"); used <= total {
				c.MemoryFreeMiB = total - used
			}
		}
		c.UUID = text(lookup(g, "GPU UUID"))
		if c.UUID == "" {
			c.UUID = text(lookup(g, "UUID"))
		}
		c.PCIBusID = text(lookup(asObject(lookup(g, "PCI")), "Bus Id"))
		if c.PCIBusID == "" {
			c.PCIBusID = text(lookup(g, "Bus Id"))
		}
		c.Telemetry.UtilizationPct = percent(lookup(asObject(lookup(g, "Utilization")), "Gpu"))
		c.Telemetry.TemperatureC = celsius(lookup(asObject(lookup(g, "Temperature")), "GPU Current Temp"))
		c.Telemetry.PowerW = watts(lookup(asObject(lookup(g, "Power Readings")), "Power Draw"))
		cards = append(cards, c)
	}
	return cards, nil
}
