package bench

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseScenarios(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want []string
		bad  string
	}{
		{in: nil, want: Scenarios()},
		{in: []string{"quality", "placement"}, want: []string{"placement", "quality"}},
		{in: []string{"gossip,failover", " Gossip "}, want: []string{"failover", "gossip"}},
		{in: []string{"all"}, want: Scenarios()},
		{in: []string{"placement", "latency"}, bad: `unknown scenario "latency": known are placement, throughput, scaleup, failover, gossip, quality`},
	} {
		got, err := ParseScenarios(c.in)
		if c.bad != "" {
			if !errors.Is(err, ErrUnknownScenario) || !strings.Contains(err.Error(), c.bad) {
				t.Errorf("%q: error %v, want %q", c.in, err, c.bad)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q: %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("the defaults: %v", err)
	}
	if err := Tiny().Validate(); err != nil {
		t.Errorf("Tiny: %v", err)
	}
	for name, c := range map[string]Config{
		"3 nodes":       {Nodes: 3},
		"negative":      {Nodes: -1},
		"17 cards":      {CardsPerNode: 17},
		"bad scenario":  {Scenarios: []string{"nope"}},
		"no jobs":       {QualityJobs: -1},
		"gossip of one": {GossipNodes: 1},
		"samples":       {Samples: -1},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// The memory check refuses a mesh beyond what is available, with the
// estimate, and lets the defaults through.
func TestCheckMemory(t *testing.T) {
	if _, avail := memInfo(); avail == 0 {
		t.Skip("no /proc/meminfo here")
	}
	if err := CheckMemory(Config{}); err != nil {
		t.Errorf("the defaults: %v", err)
	}
	err := CheckMemory(Config{Nodes: 10_000_000})
	if !errors.Is(err, ErrTooBig) || !strings.Contains(err.Error(), "MiB at the peak") {
		t.Errorf("10M nodes: %v", err)
	}
	if got := EstimateMiB(Config{Scenarios: []string{ScenarioQuality}, Nodes: 10_000_000}); got > 1000 {
		t.Errorf("quality alone estimated at %d MiB: it builds no full node", got)
	}
}
