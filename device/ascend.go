package device

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// Huawei Ascend NPUs are read from the table `npu-smi info` prints, as
// documented in Huawei's "npu-smi command reference" (Ascend HDK docs,
// https://support.huawei.com/enterprise/en/ascend-computing). Every NPU is a
// pair of rows between '+===' rules:
//
//	| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
//	| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
//	+===========================+===============+====================================================+
//	| 0     910B3               | OK            | 93.6        40                0    / 0             |
//	| 0                         | 0000:C1:00.0  | 0           0    / 0          3161 / 65536         |
//
// A card with several chips (Atlas 300I: "Chip  Device" header) has one row
// per chip, the second number being the chip's logical device id, which is
// what ASCEND_RT_VISIBLE_DEVICES takes. Device memory is HBM where the card
// has it, else the Memory-Usage column. Health is OK, Warning, Alarm or
// Critical; Alarm and Critical make a card unhealthy. The process table that
// follows has four columns and is skipped.

var npuSMIArgs = []string{"info"}

// NewAscend returns the backend for Huawei Ascend NPUs. It runs npu-smi
// through r.
func NewAscend(r Runner, cat *Catalog) Backend {
	return &toolBackend{
		name: "ascend", vendor: VendorHuawei, runner: r, cat: cat,
		sources: []toolSource{{tool: "npu-smi", read: func(ctx context.Context, r Runner) ([]Card, error) {
			out, err := runTool(ctx, r, "npu-smi", npuSMIArgs...)
			if err != nil {
				return nil, err
			}
			cards, err := parseNPUSMIInfo(out)
			if err != nil {
				return nil, parseErr("npu-smi", npuSMIArgs, err)
			}
			return cards, nil
		}}},
	}
}

// parseNPUSMIInfo reads the table of `npu-smi info`.
func parseNPUSMIInfo(data []byte) ([]Card, error) {
	text := string(data)
	if !strings.Contains(text, "npu-smi") && !strings.Contains(text, "Bus-Id") {
		return nil, fmt.Errorf("no npu-smi table")
	}
	var cards []Card
	var npu *npuRow // the NPU row the next chip rows belong to
	seq := 0        // chips in table order: the logical id when none is printed
	for lineNo, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") || !strings.HasSuffix(line, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 3 {
			continue // banner, process table, "No running processes"
		}
		first := strings.Fields(cells[0])
		if len(first) == 0 {
			continue
		}
		if _, err := strconv.Atoi(first[0]); err != nil {
			continue // header rows: "NPU Name", "Chip", "Chip Device"
		}
		if busLike(strings.TrimSpace(cells[1])) {
			if npu == nil {
				return nil, fmt.Errorf("line %d: chip row before any NPU row", lineNo+1)
			}
			c, err := npuChip(*npu, first, cells, seq)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", lineNo+1, err)
			}
			cards = append(cards, c)
			seq++
			continue
		}
		row, err := parseNPURow(first, cells)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", lineNo+1, err)
		}
		npu = &row
	}
	seen := map[int]bool{}
	for _, c := range cards {
		if seen[c.Index] {
			return nil, fmt.Errorf("device %d listed twice", c.Index)
		}
		seen[c.Index] = true
	}
	return cards, nil
}

// npuRow is the first row of an NPU: id, name, health, power, temperature.
type npuRow struct {
	id     int
	name   string
	health Health
	powerW float64
	tempC  uint32
}

func parseNPURow(first, cells []string) (npuRow, error) {
	id, _ := strconv.Atoi(first[0])
	if len(first) < 2 {
		return npuRow{}, fmt.Errorf("NPU %d: no name", id)
	}
	name := strings.Join(first[1:], " ")
	if !strings.HasPrefix(strings.ToLower(name), "ascend") {
		name = "Ascend " + name
	}
	r := npuRow{id: id, name: name, health: Healthy()}
	switch h := strings.TrimSpace(cells[1]); strings.ToLower(h) {
	case "ok", "warning":
	case "":
		return npuRow{}, fmt.Errorf("NPU %d: no health", id)
	default:
		r.health = Unhealthy("npu-smi health %s", h)
	}
	if f := strings.Fields(cells[2]); len(f) >= 2 {
		r.powerW = watts(f[0])
		r.tempC = celsius(f[1])
	}
	return r, nil
}

// npuChip builds a card from a chip row: bus id, AICore %, memory pairs.
func npuChip(npu npuRow, first, cells []string, seq int) (Card, error) {
	c := Card{
		Vendor:   VendorHuawei,
		Name:     npu.name,
		Index:    seq,
		PCIBusID: strings.TrimSpace(cells[1]),
		Health:   npu.health,
	}
	if len(first) >= 2 {
		logical, err := strconv.Atoi(first[1])
		if err != nil || logical < 0 {
			return c, fmt.Errorf("NPU %d: bad device id %q", npu.id, first[1])
		}
		c.Index = logical
	}
	c.Telemetry = Telemetry{PowerW: npu.powerW, TemperatureC: npu.tempC}
	f := strings.Fields(cells[2])
	if len(f) == 0 {
		return c, fmt.Errorf("NPU %d: empty usage cell", npu.id)
	}
	c.Telemetry.UtilizationPct = percent(f[0])
	pairs, err := usagePairs(f[1:])
	if err != nil {
		return c, fmt.Errorf("NPU %d: %w", npu.id, err)
	}
	var used, total uint64
	switch {
	case len(pairs) >= 2 && pairs[1][1] > 0: // HBM
		used, total = pairs[1][0], pairs[1][1]
	case len(pairs) >= 1:
		used, total = pairs[0][0], pairs[0][1]
	}
	if total == 0 {
		return c, fmt.Errorf("NPU %d: no memory size", npu.id)
	}
	if total > 1<<30 {
		return c, fmt.Errorf("NPU %d: memory size %d MB out of range", npu.id, total)
	}
	c.MemoryMiB = total
	if used <= total {
		c.MemoryFreeMiB = total - used
	}
	return c, nil
}

// usagePairs reads "used / total" pairs: ["0", "/", "0", "3161", "/", "65536"]
// or ["0/0", "3161/65536"].
func usagePairs(f []string) ([][2]uint64, error) {
	joined := strings.ReplaceAll(strings.Join(f, " "), " / ", "/")
	joined = strings.ReplaceAll(strings.ReplaceAll(joined, " /", "/"), "/ ", "/")
	var out [][2]uint64
	for _, tok := range strings.Fields(joined) {
		a, b, ok := strings.Cut(tok, "/")
		if !ok {
			return nil, fmt.Errorf("usage %q is not used / total", tok)
		}
		used, err1 := strconv.ParseUint(a, 10, 64)
		total, err2 := strconv.ParseUint(b, 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("usage %q is not used / total", tok)
		}
		out = append(out, [2]uint64{used, total})
	}
	return out, nil
}

// busLike reports whether s looks like a PCI bus id ("0000:C1:00.0").
func busLike(s string) bool {
	var a, b, c, d uint64
	if n, err := fmt.Sscanf(s, "%x:%x:%x.%x", &a, &b, &c, &d); err == nil && n == 4 {
		return true
	}
	n, err := fmt.Sscanf(s, "%x:%x.%x", &a, &b, &c)
	return err == nil && n == 3
}
