package device

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// replay is a Runner that answers commands from recorded files. A command it
// has no answer for is a tool that is not installed.
type replay struct {
	t       *testing.T
	answers map[string]string // "tool arg..." → testdata file, or "!fail" / "!garbage"

	mu    sync.Mutex
	calls []string
}

func (r *replay) Run(ctx context.Context, tool string, args ...string) ([]byte, error) {
	cmd := strings.Join(append([]string{tool}, args...), " ")
	r.mu.Lock()
	r.calls = append(r.calls, cmd)
	r.mu.Unlock()
	ans, ok := r.answers[cmd]
	if !ok {
		for k, v := range r.answers { // "tool *" answers every command of a tool
			if k == tool+" *" {
				ans, ok = v, true
			}
		}
	}
	switch {
	case !ok:
		return nil, fmt.Errorf("%s: %w", tool, exec.ErrNotFound)
	case ans == "!fail":
		return nil, fmt.Errorf("%s: exit status 1: error: driver not initialized", cmd)
	case ans == "!garbage":
		return []byte("Segmentation fault (core dumped)\n\x00\x01 not a table"), nil
	}
	data, err := os.ReadFile(filepath.Join("testdata", ans))
	if err != nil {
		r.t.Fatalf("fixture: %v", err)
	}
	return data, nil
}

const rocmArgs = "--showproductname --showmeminfo vram --showbus --showuse --showtemp --showpower --showuniqueid --json"

func cardsOf(t *testing.T, b Backend) []Card {
	t.Helper()
	cards, err := b.Cards(context.Background())
	if err != nil {
		t.Fatalf("%s: %v", b.Name(), err)
	}
	return cards
}

func TestAMDSMIBothShapes(t *testing.T) {
	for _, static := range []string{"amd-smi/static-list.json", "amd-smi/static-gpu_data.json"} {
		t.Run(static, func(t *testing.T) {
			r := &replay{t: t, answers: map[string]string{
				"amd-smi static --json": static,
				"amd-smi list --json":   "amd-smi/list.json",
				"amd-smi metric --json": "amd-smi/metric.json",
			}}
			cards := cardsOf(t, NewAMD(r, DefaultCatalog()))
			if len(cards) < 2 {
				t.Fatalf("got %d cards", len(cards))
			}
			c := cards[0]
			if c.Model != "mi300x-192g" || !c.Known || c.Vendor != VendorAMD || c.Backend != "amd" ||
				c.MemoryMiB != 196592 || c.MemoryFreeMiB != 46480 || c.Arch != "gfx942" ||
				c.PCIBusID != "0000:0c:00.0" || c.UUID != "a3ff74a1-0000-1000-8031-9d2e5c41f7b2" ||
				c.ID != "amd-a3ff74a1-0000-1000-8031-9d2e5c41f7b2" || c.ComputeUnits != 4.189 ||
				c.Telemetry != (Telemetry{UtilizationPct: 87, TemperatureC: 71, PowerW: 612}) || !c.Health.Healthy {
				t.Errorf("card 0 = %+v", c)
			}
			if f := cards[1].MemoryFreeMiB; f != 196592-283 {
				t.Errorf("card 1 free = %d, want total - used", f)
			}
			if static == "amd-smi/static-gpu_data.json" {
				w := cards[2]
				if w.Known || w.Model != "x-radeon-pro-w7900-48g" || w.ComputeUnits != 0 || w.PCIBusID != "0000:c3:00.0" ||
					w.Telemetry.TemperatureC != 33 || w.MemoryFreeMiB != 48000 {
					t.Errorf("unknown card = %+v", w)
				}
			}
		})
	}
}

func TestAMDFallsBackToROCmSMI(t *testing.T) {
	r := &replay{t: t, answers: map[string]string{"rocm-smi " + rocmArgs: "rocm-smi/mi300x.json"}}
	cards := cardsOf(t, NewAMD(r, DefaultCatalog()))
	if len(cards) != 2 {
		t.Fatalf("got %d cards", len(cards))
	}
	c := cards[0]
	if c.Model != "mi300x-192g" || c.MemoryMiB != 196592 || c.MemoryFreeMiB != 196592-150112 ||
		c.PCIBusID != "0000:0c:00.0" || c.ID != "amd-0x9d2e5c41f7b2a3ff" || c.Arch != "gfx942" ||
		c.Telemetry != (Telemetry{UtilizationPct: 91, TemperatureC: 70, PowerW: 608}) {
		t.Errorf("card 0 = %+v", c)
	}
	if r.calls[0] != "amd-smi static --json" {
		t.Errorf("amd-smi was not tried first: %v", r.calls)
	}
}

func TestHygon(t *testing.T) {
	cases := []struct {
		name    string
		answers map[string]string
		n       int
		model   string
		mem     uint64
		free    uint64
		util    uint32
		bus     string
	}{
		{"hy-smi DCU use", map[string]string{"hy-smi " + rocmArgs: "hy-smi/bw1000-dcu.json"},
			2, "hygon-bw1000-64g", 65520, 64496, 12, "0000:1b:00.0"},
		{"hy-smi HCU use", map[string]string{"hy-smi " + rocmArgs: "hy-smi/k100-hcu.json"},
			1, "x-k100-ai-64g", 65520, 65520 - 8192, 35, "0000:9f:00.0"},
		{"rocm-smi on a Hygon node", map[string]string{"rocm-smi " + rocmArgs: "rocm-smi/hygon-bw1000.json"},
			2, "hygon-bw1000-64g", 65520, 32760, 64, "0000:1b:00.0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &replay{t: t, answers: tc.answers}
			cards := cardsOf(t, NewHygon(r, DefaultCatalog()))
			if len(cards) != tc.n {
				t.Fatalf("got %d cards, want %d", len(cards), tc.n)
			}
			c := cards[0]
			if c.Vendor != VendorHygon || c.Model != tc.model || c.MemoryMiB != tc.mem || c.MemoryFreeMiB != tc.free ||
				c.Telemetry.UtilizationPct != tc.util || c.PCIBusID != tc.bus || c.Backend != "hygon" {
				t.Errorf("card 0 = %+v", c)
			}
		})
	}
}

// rocm-smi on a Hygon node lists Hygon cards: the AMD backend must not claim
// them, and rocm-smi on an AMD node gives the Hygon backend nothing.
func TestROCmSMIVendorsStayApart(t *testing.T) {
	hygonNode := &replay{t: t, answers: map[string]string{"rocm-smi " + rocmArgs: "rocm-smi/hygon-bw1000.json"}}
	_, err := NewAMD(hygonNode, DefaultCatalog()).Cards(context.Background())
	if !errors.Is(err, ErrAbsent) || !strings.Contains(err.Error(), "rocm-smi lists no amd cards") {
		t.Errorf("AMD backend on a Hygon node: %v", err)
	}
	amdNode := &replay{t: t, answers: map[string]string{"rocm-smi " + rocmArgs: "rocm-smi/mi300x.json"}}
	_, err = NewHygon(amdNode, DefaultCatalog()).Cards(context.Background())
	if !errors.Is(err, ErrAbsent) || !strings.Contains(err.Error(), "hy-smi not found") {
		t.Errorf("Hygon backend on an AMD node: %v", err)
	}
}

func TestMThreads(t *testing.T) {
	r := &replay{t: t, answers: map[string]string{"mthreads-gmi -q --json": "mthreads-gmi/s4000.json"}}
	cards := cardsOf(t, NewMThreads(r, DefaultCatalog()))
	if len(cards) != 4 {
		t.Fatalf("got %d cards", len(cards))
	}
	c := cards[0]
	if c.Model != "mtt-s4000-48g" || c.Vendor != VendorMThreads || c.MemoryMiB != 49152 || c.MemoryFreeMiB != 8192 ||
		c.PCIBusID != "0000:1b:00.0" || c.UUID != "0b1f3a24-6c6e-4d1c-9d1e-3f1a8d2c7b10" || c.Index != 0 ||
		c.Telemetry != (Telemetry{UtilizationPct: 97, TemperatureC: 66, PowerW: 381.2}) {
		t.Errorf("card 0 = %+v", c)
	}
	if c := cards[2]; c.MemoryFreeMiB != 49152-512 || c.Telemetry != (Telemetry{}) || c.Index != 2 {
		t.Errorf("card 2 (N/A telemetry, no Free) = %+v", c)
	}
}

func TestAscend(t *testing.T) {
	r := &replay{t: t, answers: map[string]string{"npu-smi info": "npu-smi/910b.txt"}}
	cards := cardsOf(t, NewAscend(r, DefaultCatalog()))
	if len(cards) != 8 {
		t.Fatalf("got %d cards", len(cards))
	}
	c := cards[0]
	if c.Model != "ascend-910b-64g" || c.Name != "Ascend 910B3" || c.Vendor != VendorHuawei || c.MemoryMiB != 65536 ||
		c.MemoryFreeMiB != 65536-58342 || c.PCIBusID != "0000:c1:00.0" || c.ID != "huawei-0000:c1:00.0" ||
		c.Telemetry != (Telemetry{UtilizationPct: 94, TemperatureC: 52, PowerW: 291.4}) || !c.Health.Healthy {
		t.Errorf("card 0 = %+v", c)
	}
	if h := cards[3].Health; h.Healthy || h.Reason != "npu-smi health Alarm" {
		t.Errorf("NPU 3 health = %+v, want unhealthy (Alarm)", h)
	}
	if !cards[5].Health.Healthy {
		t.Errorf("NPU 5 (Warning) should stay healthy: %+v", cards[5].Health)
	}
	for i, c := range cards {
		if c.Index != i {
			t.Errorf("card %d index %d", i, c.Index)
		}
	}
}

func TestAscendMultiChipCard(t *testing.T) {
	r := &replay{t: t, answers: map[string]string{"npu-smi info": "npu-smi/310p.txt"}}
	cards := cardsOf(t, NewAscend(r, DefaultCatalog()))
	if len(cards) != 2 {
		t.Fatalf("got %d cards", len(cards))
	}
	for i, c := range cards {
		if c.Index != i || c.Name != "Ascend 310P3" || c.MemoryMiB != 21527 || c.Known || c.Telemetry.PowerW != 0 {
			t.Errorf("chip %d = %+v", i, c)
		}
	}
	if cards[1].PCIBusID != "0000:02:00.0" || cards[1].MemoryFreeMiB != 21527-1470 {
		t.Errorf("chip 1 = %+v", cards[1])
	}
}

func TestKunlunxin(t *testing.T) {
	r := &replay{t: t, answers: map[string]string{"xpu-smi -m": "xpu-smi/p800.txt"}}
	cards := cardsOf(t, NewKunlunxin(r, DefaultCatalog()))
	if len(cards) != 4 {
		t.Fatalf("got %d cards", len(cards))
	}
	c := cards[0]
	if c.Model != "kunlun-p800-96g" || c.Name != "P800 OAM" || c.Vendor != VendorKunlunxin || c.MemoryMiB != 98304 ||
		c.MemoryFreeMiB != 98304-87120 || c.PCIBusID != "0000:1a:00.0" || c.Index != 0 ||
		c.Telemetry != (Telemetry{UtilizationPct: 93, TemperatureC: 45, PowerW: 142}) {
		t.Errorf("card 0 = %+v", c)
	}
	if cards[3].Index != 3 || cards[3].ID != "kunlunxin-0000:3e:00.0" {
		t.Errorf("card 3 = %+v", cards[3])
	}
}

// A missing tool makes its backend absent; a tool that fails or prints
// garbage makes it failed with the reason; and neither touches the others.
func TestToolBackendsAbsentAndFailed(t *testing.T) {
	cat := DefaultCatalog()
	ctx := context.Background()
	cases := []struct {
		name    string
		b       func(Runner) Backend
		answers map[string]string
		absent  bool
		reason  string
	}{
		{"amd nothing installed", func(r Runner) Backend { return NewAMD(r, cat) }, nil, true,
			"amd-smi not found; rocm-smi not found"},
		{"amd-smi fails", func(r Runner) Backend { return NewAMD(r, cat) },
			map[string]string{"amd-smi *": "!fail"}, false, "driver not initialized"},
		{"amd-smi garbage, rocm-smi rescues", func(r Runner) Backend { return NewAMD(r, cat) },
			map[string]string{"amd-smi *": "!garbage", "rocm-smi " + rocmArgs: "rocm-smi/mi300x.json"}, false, ""},
		{"mthreads garbage", func(r Runner) Backend { return NewMThreads(r, cat) },
			map[string]string{"mthreads-gmi *": "!garbage"}, false, "mthreads-gmi -q --json: output not understood"},
		{"npu-smi garbage", func(r Runner) Backend { return NewAscend(r, cat) },
			map[string]string{"npu-smi *": "!garbage"}, false, "npu-smi info: output not understood"},
		{"xpu-smi garbage", func(r Runner) Backend { return NewKunlunxin(r, cat) },
			map[string]string{"xpu-smi *": "!garbage"}, false, "xpu-smi -m: output not understood"},
		{"hy-smi wrong tool output", func(r Runner) Backend { return NewHygon(r, cat) },
			map[string]string{"hy-smi *": "npu-smi/910b.txt"}, false, "hy-smi " + rocmArgs + ": output not understood"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &replay{t: t, answers: tc.answers}
			cards, err := tc.b(r).Cards(ctx)
			if tc.reason == "" {
				if err != nil || len(cards) == 0 {
					t.Fatalf("want cards, got %v, %v", cards, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("want an error, got %d cards", len(cards))
			}
			if errors.Is(err, ErrAbsent) != tc.absent || !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("err = %v (absent %v), want absent=%v with %q", err, errors.Is(err, ErrAbsent), tc.absent, tc.reason)
			}
		})
	}
}

func TestParsersRejectMalformedOutput(t *testing.T) {
	cases := []struct {
		name  string
		parse func([]byte) ([]Card, error)
		in    string
		want  string
	}{
		{"amd-smi object", parseAMDSMIStatic, `{"gpus": []}`, "without \"gpu_data\""},
		{"amd-smi no name", parseAMDSMIStatic, `[{"gpu": 0, "vram": {"size": "1 MB"}}]`, "no asic.market_name"},
		{"amd-smi no memory", parseAMDSMIStatic, `[{"gpu": 0, "asic": {"market_name": "X"}}]`, "no usable vram.size"},
		{"amd-smi bad unit", parseAMDSMIStatic, `[{"gpu": 0, "asic": {"market_name": "X"}, "vram": {"size": "4 parsecs"}}]`, "no usable vram.size"},
		{"amd-smi twice", parseAMDSMIStatic, `[{"gpu": 0, "asic": {"market_name": "X"}, "vram": {"size": 1}}, {"gpu": 0, "asic": {"market_name": "X"}, "vram": {"size": 1}}]`, "listed twice"},
		{"amd-smi fractional index", parseAMDSMIStatic, `[{"gpu": 0.5}]`, "bad \"gpu\" index"},
		{"rocm-smi card not object", parseROCmSMI, `{"card0": "x"}`, "card0 is not an object"},
		{"rocm-smi bad key", parseROCmSMI, `{"cardX": {}}`, "bad card key"},
		{"rocm-smi no memory", parseROCmSMI, `{"card0": {"Card Series": "MI300X"}}`, "no VRAM Total Memory"},
		{"rocm-smi truncated", parseROCmSMI, `{"card0": {"Card Series": "MI3`, "bad JSON"},
		{"mthreads GPU string", parseMThreadsGMI, `{"GPU": "none"}`, "neither a list nor an object"},
		{"mthreads no total", parseMThreadsGMI, `{"GPU": [{"Index": "0", "Product Name": "MTT S4000"}]}`, "FB Memory Usage.Total"},
		{"npu-smi chip first", parseNPUSMIInfo, "| npu-smi 1 |\n| 0 | 0000:C1:00.0 | 0 0 / 0 |\n", "chip row before any NPU row"},
		{"npu-smi no memory", parseNPUSMIInfo, "npu-smi\n| 0 910B3 | OK | 90 40 0 / 0 |\n| 0 | 0000:C1:00.0 | 0 0 / 0 0 / 0 |\n", "no memory size"},
		{"npu-smi bad usage", parseNPUSMIInfo, "npu-smi\n| 0 910B3 | OK | 90 40 0 / 0 |\n| 0 | 0000:C1:00.0 | 0 lots |\n", "not used / total"},
		{"xpu-smi short line", parseXPUSMIMachine, "0 1 2 3\n", "4 fields"},
		{"xpu-smi text where numbers", parseXPUSMIMachine, strings.Repeat("x ", 25) + `"P800"` + "\n", "not a number"},
		{"xpu-smi open quote", parseXPUSMIMachine, `0 0 "P800 OAM` + "\n", "unterminated quote"},
	}
	for _, tc := range cases {
		_, err := tc.parse([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestQuantities(t *testing.T) {
	cases := []struct {
		in   any
		mib  uint64
		unit string
		ok   bool
	}{
		{"49152MiB", 49152, "", true},
		{"196592 MB", 196592, "", true},
		{"206141652992", 196592, "B", true},
		{"64 GiB", 65536, "", true},
		{"N/A", 0, "", false},
		{"", 0, "", false},
		{"-5 MiB", 0, "", false},
	}
	for _, tc := range cases {
		n, unit, ok := quantity(tc.in)
		if ok != tc.ok {
			t.Errorf("quantity(%q) ok = %v", tc.in, ok)
			continue
		}
		if !ok {
			continue
		}
		got, _ := toMiB(n, unit, tc.unit)
		if got != tc.mib {
			t.Errorf("%q → %d MiB, want %d", tc.in, got, tc.mib)
		}
	}
}

// Fuzz targets: no tool output may panic a parser, and what a parser
// accepts must be a usable card list.

func fuzzSeeds(f *testing.F, files ...string) {
	for _, name := range files {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte{})
	f.Add([]byte("garbage"))
}

func checkParsed(t *testing.T, cards []Card, err error) {
	if err != nil {
		return
	}
	idx := map[int]bool{}
	for _, c := range cards {
		if strings.TrimSpace(c.Name) == "" || c.MemoryMiB == 0 {
			t.Fatalf("accepted a card without name or memory: %+v", c)
		}
		if c.MemoryFreeMiB > c.MemoryMiB {
			t.Fatalf("free > total: %+v", c)
		}
		if idx[c.Index] {
			t.Fatalf("two cards with index %d", c.Index)
		}
		idx[c.Index] = true
		if c.Telemetry.UtilizationPct > 100 {
			t.Fatalf("utilization over 100: %+v", c)
		}
	}
}

func FuzzParseAMDSMIStatic(f *testing.F) {
	fuzzSeeds(f, "amd-smi/static-list.json", "amd-smi/static-gpu_data.json")
	f.Fuzz(func(t *testing.T, data []byte) {
		cards, err := parseAMDSMIStatic(data)
		checkParsed(t, cards, err)
	})
}

func FuzzParseAMDSMIMetric(f *testing.F) {
	fuzzSeeds(f, "amd-smi/metric.json", "amd-smi/list.json")
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = parseAMDSMIList(data)
		m, err := parseAMDSMIMetric(data)
		if err == nil {
			for _, v := range m {
				if v.Telemetry.UtilizationPct > 100 {
					t.Fatalf("utilization over 100: %+v", v)
				}
			}
		}
	})
}

func FuzzParseROCmSMI(f *testing.F) {
	fuzzSeeds(f, "rocm-smi/mi300x.json", "rocm-smi/hygon-bw1000.json", "hy-smi/bw1000-dcu.json", "hy-smi/k100-hcu.json")
	f.Fuzz(func(t *testing.T, data []byte) {
		cards, err := parseROCmSMI(data)
		checkParsed(t, cards, err)
	})
}

func FuzzParseMThreadsGMI(f *testing.F) {
	fuzzSeeds(f, "mthreads-gmi/s4000.json")
	f.Fuzz(func(t *testing.T, data []byte) {
		cards, err := parseMThreadsGMI(data)
		checkParsed(t, cards, err)
	})
}

func FuzzParseNPUSMIInfo(f *testing.F) {
	fuzzSeeds(f, "npu-smi/910b.txt", "npu-smi/310p.txt")
	f.Fuzz(func(t *testing.T, data []byte) {
		cards, err := parseNPUSMIInfo(data)
		checkParsed(t, cards, err)
	})
}

func FuzzParseXPUSMIMachine(f *testing.F) {
	fuzzSeeds(f, "xpu-smi/p800.txt")
	f.Fuzz(func(t *testing.T, data []byte) {
		cards, err := parseXPUSMIMachine(data)
		checkParsed(t, cards, err)
	})
}

func TestAMDReportsHardwareEvidence(t *testing.T) {
	data, err := os.ReadFile("testdata/amd-smi/static-list.json")
	if err != nil {
		t.Fatal(err)
	}
	cards, err := parseAMDSMIStatic(data)
	if err != nil {
		t.Fatal(err)
	}
	e := cards[0].Evidence
	if e == nil || e.Serial != "692251001124" || e.BoardPartNumber != "102-G30211-00" || e.PCIDeviceID != 0x74a11002 || e.PCISubsystemID != 0x1002 {
		t.Fatalf("evidence %+v", e)
	}
}
