package device

import (
	"context"
	"fmt"
	"math"
	"strings"
)

// Kunlunxin XPUs are read from `xpu-smi -m`, the machine-readable form of
// xpu-smi: one line per device, fields separated by spaces, the model name a
// double-quoted field. Kunlunxin's xpu-smi manual (shipped with the XPU
// driver, not published openly) lists the fields; the positions read here are
// those the public collectors rely on (for example SwanLab's Kunlunxin
// collector and FlagPerf's xpu-smi probe, both on GitHub), counting from 0
// with the quoted name as one field:
//
//	1   device id (the index XPU_VISIBLE_DEVICES takes)
//	4   temperature, °C
//	8   power draw, W
//	17  memory used, MiB
//	18  memory total, MiB
//	19  utilization, %
//	    the quoted field: the model name ("P800 OAM")
//
// Any field shaped like a PCI bus id is taken as the device's bus id. Lines
// too short to hold these fields, or with non-numbers in them, are an error:
// a changed layout must not be read as wrong figures.

var xpuSMIArgs = []string{"-m"}

// xpuMinFields is the fewest fields a device line can have.
const xpuMinFields = 21

// NewKunlunxin returns the backend for Kunlunxin XPUs. It runs xpu-smi
// through r.
func NewKunlunxin(r Runner, cat *Catalog) Backend {
	return &toolBackend{
		name: "kunlunxin", vendor: VendorKunlunxin, runner: r, cat: cat,
		sources: []toolSource{{tool: "xpu-smi", read: func(ctx context.Context, r Runner) ([]Card, error) {
			out, err := runTool(ctx, r, "xpu-smi", xpuSMIArgs...)
			if err != nil {
				return nil, err
			}
			cards, err := parseXPUSMIMachine(out)
			if err != nil {
				return nil, parseErr("xpu-smi", xpuSMIArgs, err)
			}
			return cards, nil
		}}},
	}
}

// parseXPUSMIMachine reads `xpu-smi -m`.
func parseXPUSMIMachine(data []byte) ([]Card, error) {
	var cards []Card
	seen := map[int]bool{}
	for lineNo, line := range strings.Split(string(data), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		fields, quoted, err := splitQuoted(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", lineNo+1, err)
		}
		if len(fields) < xpuMinFields {
			return nil, fmt.Errorf("line %d: %d fields, want at least %d", lineNo+1, len(fields), xpuMinFields)
		}
		num := func(i int, what string) (float64, error) {
			f, unit, ok := parseQuantity(fields[i])
			if !ok || unit != "" {
				return 0, fmt.Errorf("line %d: field %d (%s) %q is not a number", lineNo+1, i, what, fields[i])
			}
			return f, nil
		}
		id, err := num(1, "device id")
		if err != nil {
			return nil, err
		}
		if id != math.Trunc(id) || id > 1<<16 {
			return nil, fmt.Errorf("line %d: bad device id %q", lineNo+1, fields[1])
		}
		c := Card{Vendor: VendorKunlunxin, Index: int(id)}
		if seen[c.Index] {
			return nil, fmt.Errorf("line %d: device %d listed twice", lineNo+1, c.Index)
		}
		seen[c.Index] = true
		used, err := num(17, "memory used")
		if err != nil {
			return nil, err
		}
		total, err := num(18, "memory total")
		if err != nil {
			return nil, err
		}
		if total == 0 || total > 1<<30 {
			return nil, fmt.Errorf("line %d: memory total %q out of range", lineNo+1, fields[18])
		}
		c.MemoryMiB = uint64(total)
		if used <= total {
			c.MemoryFreeMiB = uint64(total - used)
		}
		if _, err := num(19, "utilization"); err != nil {
			return nil, err
		}
		c.Telemetry = Telemetry{
			UtilizationPct: percent(fields[19]),
			TemperatureC:   celsius(fields[4]),
			PowerW:         watts(fields[8]),
		}
		for i, f := range fields {
			switch {
			case quoted[i] && c.Name == "":
				c.Name = strings.TrimSpace(f)
			case !quoted[i] && c.PCIBusID == "" && strings.Count(f, ":") >= 1 && busLike(f):
				c.PCIBusID = f
			}
		}
		if c.Name == "" {
			return nil, fmt.Errorf("line %d: no quoted model name", lineNo+1)
		}
		cards = append(cards, c)
	}
	return cards, nil
}

// splitQuoted splits a line on spaces, keeping a double-quoted field whole.
// quoted tells which fields were quoted.
func splitQuoted(line string) (fields []string, quoted []bool, err error) {
	i := 0
	for i < len(line) {
		switch {
		case line[i] == ' ' || line[i] == '\t' || line[i] == '\r':
			i++
		case line[i] == '"':
			end := strings.IndexByte(line[i+1:], '"')
			if end < 0 {
				return nil, nil, fmt.Errorf("unterminated quote")
			}
			fields = append(fields, line[i+1:i+1+end])
			quoted = append(quoted, true)
			i += end + 2
		default:
			j := i
			for j < len(line) && line[j] != ' ' && line[j] != '\t' && line[j] != '\r' && line[j] != '"' {
				j++
			}
			fields = append(fields, line[i:j])
			quoted = append(quoted, false)
			i = j
		}
	}
	return fields, quoted, nil
}
