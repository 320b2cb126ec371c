package device

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// rocm-smi (AMD) and hy-smi (Hygon's fork of it, shipped with the DTK) print
// one JSON object keyed by card: {"card0": {...}, "card1": {...}, "system":
// {...}}. Each card's keys are the labels of the text output, documented in
// the ROCm SMI CLI guide
// (https://rocm.docs.amd.com/projects/rocm_smi_lib/en/latest/how-to/use-rocm-smi-cli.html)
// and Hygon's DCU toolkit manual for hy-smi. Labels changed case between
// releases ("Card series" / "Card Series"), so keys are matched ignoring case.
// The labels used:
//
//	Card Series | Card SKU | Card Model    the name ("BW200, UBB BW1000")
//	Card Vendor                            "Advanced Micro Devices, Inc. [AMD/ATI]",
//	                                       "Chengdu Haiguang IC Design Co., Ltd."
//	VRAM Total Memory (B)                  total memory; hy-smi may say (MiB)
//	VRAM Total Used Memory (B)             used memory
//	PCI Bus                                "0000:1B:00.0"
//	GPU use (%) | DCU use (%) | HCU use (%)  utilization (DCU/HCU: Hygon)
//	Temperature (Sensor junction|edge|mem) (C)
//	Current Socket Graphics Package Power (W) | Average Graphics Package Power (W)
//	Unique ID, GFX Version
//
// Hygon cards are told apart by their vendor string or a DCU/HCU use key, so
// rocm-smi on a Hygon machine feeds the Hygon backend, not the AMD one.

// rocmSMIArgs asks for everything the parser reads in one run.
var rocmSMIArgs = []string{"--showproductname", "--showmeminfo", "vram", "--showbus", "--showuse",
	"--showtemp", "--showpower", "--showuniqueid", "--json"}

// rocmSMISource runs tool (rocm-smi or hy-smi) with rocmSMIArgs. A forced
// vendor ("" for none) overrides what each card's keys say: every card hy-smi
// lists is a Hygon card.
func rocmSMISource(tool string, forced Vendor) func(context.Context, Runner) ([]Card, error) {
	return func(ctx context.Context, r Runner) ([]Card, error) {
		out, err := runTool(ctx, r, tool, rocmSMIArgs...)
		if err != nil {
			return nil, err
		}
		cards, err := parseROCmSMI(out)
		if err != nil {
			return nil, parseErr(tool, rocmSMIArgs, err)
		}
		if forced != "" {
			for i := range cards {
				cards[i].Vendor = forced
			}
		}
		return cards, nil
	}
}

// parseROCmSMI reads the JSON of rocm-smi or hy-smi. Each card's Vendor is
// VendorHygon or VendorAMD as its keys tell.
func parseROCmSMI(data []byte) ([]Card, error) {
	var top map[string]any
	if err := decodeToolJSON(data, &top); err != nil {
		return nil, err
	}
	type entry struct {
		n    int
		info map[string]any
	}
	var entries []entry
	for key, v := range top {
		num, ok := strings.CutPrefix(strings.ToLower(key), "card")
		if !ok {
			continue // "system" and the like
		}
		n, err := strconv.Atoi(num)
		if err != nil || n < 0 || n > 1<<16 {
			return nil, fmt.Errorf("bad card key %q", key)
		}
		info, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s is not an object", key)
		}
		entries = append(entries, entry{n, info})
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].n < entries[j].n })
	cards := make([]Card, 0, len(entries))
	for _, e := range entries {
		c, err := rocmSMICard(e.n, e.info)
		if err != nil {
			return nil, fmt.Errorf("card%d: %w", e.n, err)
		}
		cards = append(cards, c)
	}
	return cards, nil
}

func rocmSMICard(n int, info map[string]any) (Card, error) {
	c := Card{Index: n, Vendor: VendorAMD}
	for _, k := range []string{"Card Series", "Card SKU", "Card Model"} {
		if c.Name = text(lookup(info, k)); c.Name != "" {
			break
		}
	}
	if c.Name == "" {
		return c, fmt.Errorf("no Card Series")
	}
	vendorText := strings.ToLower(text(lookup(info, "Card Vendor")))
	if strings.Contains(vendorText, "haiguang") || strings.Contains(vendorText, "hygon") {
		c.Vendor = VendorHygon
	}
	var total, used uint64
	var haveTotal bool
	for k, v := range info {
		nk := normKey(k)
		unitDefault := unitInParens(nk)
		switch {
		case strings.HasPrefix(nk, "vram total used memory"):
			if n, unit, ok := quantity(v); ok {
				used, _ = toMiB(n, unit, unitDefault)
			}
		case strings.HasPrefix(nk, "vram total memory"):
			if n, unit, ok := quantity(v); ok {
				total, haveTotal = toMiB(n, unit, unitDefault)
			}
		}
	}
	if !haveTotal {
		if n, unit, ok := quantity(lookup(info, "Available memory size (MiB)")); ok {
			total, haveTotal = toMiB(n, unit, "MiB")
		}
	}
	if !haveTotal || total == 0 {
		return c, fmt.Errorf("no VRAM Total Memory")
	}
	c.MemoryMiB = total
	if used <= total {
		c.MemoryFreeMiB = total - used
	}
	c.PCIBusID = text(lookup(info, "PCI Bus"))
	c.UUID = text(lookup(info, "Unique ID"))
	c.Arch = text(lookup(info, "GFX Version"))
	for _, k := range []string{"DCU use (%)", "HCU use (%)"} {
		if v := lookup(info, k); v != nil {
			c.Vendor = VendorHygon
			c.Telemetry.UtilizationPct = percent(v)
		}
	}
	if v := lookup(info, "GPU use (%)"); v != nil {
		c.Telemetry.UtilizationPct = percent(v)
	}
	for _, k := range []string{"Temperature (Sensor junction) (C)", "Temperature (Sensor edge) (C)", "Temperature (Sensor mem) (C)"} {
		if t := celsius(lookup(info, k)); t > 0 {
			c.Telemetry.TemperatureC = t
			break
		}
	}
	for _, k := range []string{"Current Socket Graphics Package Power (W)", "Average Graphics Package Power (W)"} {
		if p := watts(lookup(info, k)); p > 0 {
			c.Telemetry.PowerW = p
			break
		}
	}
	return c, nil
}

// unitInParens returns the unit a label names last in parentheses: "vram
// total memory (b)" → "b".
func unitInParens(label string) string {
	i := strings.LastIndexByte(label, '(')
	j := strings.LastIndexByte(label, ')')
	if i < 0 || j < i {
		return ""
	}
	return label[i+1 : j]
}

// NewHygon returns the backend for Hygon DCUs. It runs hy-smi, or rocm-smi
// where hy-smi is missing, through r, and keeps only Hygon cards.
func NewHygon(r Runner, cat *Catalog) Backend {
	return &toolBackend{
		name: "hygon", vendor: VendorHygon, runner: r, cat: cat,
		sources: []toolSource{
			{tool: "hy-smi", read: rocmSMISource("hy-smi", VendorHygon)},
			{tool: "rocm-smi", read: rocmSMISource("rocm-smi", "")},
		},
	}
}
