package executor

import (
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/device"
)

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func TestLimitsValidate(t *testing.T) {
	good := []Limits{
		{},
		{MemoryBytes: MinMemoryBytes, Pids: MinPids, CPUWeight: 1, Network: NetworkEgress},
		{CPUWeight: MaxCPUWeight, Network: NetworkHost, Devices: []string{"nvidia0", "/dev/nvidiactl", "dri/renderD128"}},
	}
	for _, l := range good {
		if err := l.Validate(); err != nil {
			t.Errorf("%+v: %v", l, err)
		}
	}
	bad := map[string]Limits{
		"memory":       {MemoryBytes: 1 << 20},
		"negative mem": {MemoryBytes: -1},
		"pids":         {Pids: 2},
		"cpu":          {CPUWeight: MaxCPUWeight + 1},
		"network":      {Network: "public"},
		"dev escape":   {Devices: []string{"../sda"}},
		"dev abs":      {Devices: []string{"/etc/passwd"}},
		"dev unclean":  {Devices: []string{"dri//renderD128"}},
		"dev std":      {Devices: []string{"/dev/null"}},
		"dev pts":      {Devices: []string{"pts/0"}},
		"dev empty":    {Devices: []string{""}},
	}
	for name, l := range bad {
		err := l.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), "executor: limits: ") {
			t.Errorf("%s: %+v: err = %v, want a limits error", name, l, err)
		}
	}
}

func TestPolicyCap(t *testing.T) {
	p := Policy{MaxMemoryBytes: 64 << 30, MaxPids: 1000, MaxCPUWeight: 200, Networks: []NetworkMode{NetworkNone, NetworkEgress}}
	for _, tc := range []struct {
		in, want Limits
	}{
		{Limits{}, Limits{MemoryBytes: 64 << 30, Pids: 1000, CPUWeight: 100}},
		{Limits{MemoryBytes: 8 << 30, Pids: 50, CPUWeight: 500, Network: NetworkEgress},
			Limits{MemoryBytes: 8 << 30, Pids: 50, CPUWeight: 200, Network: NetworkEgress}},
		{Limits{MemoryBytes: 128 << 30, Pids: 5000, Devices: []string{"nvidia1"}},
			Limits{MemoryBytes: 64 << 30, Pids: 1000, CPUWeight: 100, Devices: []string{"nvidia1"}}},
	} {
		got, err := p.Cap(tc.in)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Cap(%+v) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	if _, err := p.Cap(Limits{Network: NetworkHost}); err == nil || !strings.Contains(err.Error(), `"host" not allowed`) {
		t.Errorf("host network under a policy without it: %v", err)
	}
	if _, err := (Policy{}).Cap(Limits{Network: NetworkEgress}); err == nil {
		t.Error("the zero policy allowed egress")
	}
	if got, err := (Policy{}).Cap(Limits{Pids: 9}); err != nil || got.Pids != 9 || got.MemoryBytes != 0 {
		t.Errorf("the zero policy changed limits: %+v, %v", got, err)
	}
	if _, err := p.Cap(Limits{Pids: 1}); err == nil {
		t.Error("Cap passed invalid limits through")
	}
}

func TestCardDevices(t *testing.T) {
	dev := t.TempDir()
	for _, n := range []string{"nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-caps/nvidia-cap1", "davinci3", "davinci_manager", "kfd"} {
		p := filepath.Join(dev, n)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cards := []device.Card{
		{Vendor: device.VendorNVIDIA, Index: 1, Backend: "nvml"},
		{Vendor: device.VendorHuawei, Index: 3, Backend: "npu-smi"},
		{Vendor: device.VendorNVIDIA, Index: 0, Backend: "sim"}, // simulated: no nodes
	}
	want := []string{"davinci3", "davinci_manager", "nvidia-uvm", "nvidia1", "nvidiactl"}
	if got := CardDevices(dev, cards); !reflect.DeepEqual(got, want) {
		t.Errorf("CardDevices = %v, want %v", got, want)
	}
	for _, d := range CardDevices(dev, cards) {
		if err := (Limits{Devices: []string{d}}).Validate(); err != nil {
			t.Errorf("CardDevices gave %q, which Limits refuses: %v", d, err)
		}
	}
}
