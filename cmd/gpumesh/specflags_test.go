package main

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/market"
)

// opts is a valid base: one card, a price, a command.
func opts(mod func(*submitOptions)) submitOptions {
	o := submitOptions{id: "j1", gpus: 1, maxPrice: 10, maxPriceSet: true, command: []string{"python", "train.py"}}
	if mod != nil {
		mod(&o)
	}
	return o
}

func TestBuildSpec(t *testing.T) {
	cat := device.DefaultCatalog()
	base := market.JobSpec{ID: "j1", Cards: 1, MaxPriceCNY: 10, Command: []string{"python", "train.py"}}
	cases := []struct {
		name string
		mod  func(*submitOptions)
		want func(*market.JobSpec)
	}{
		{"minimal", nil, func(*market.JobSpec) {}},
		{"models and vendors", func(o *submitOptions) {
			o.models = []string{"h100-sxm-80g", " h200-* "}
			o.vendors = []string{"NVIDIA"}
		}, func(s *market.JobSpec) {
			s.Models = []string{"h100-sxm-80g", "h200-*"}
			s.Vendors = []device.Vendor{device.VendorNVIDIA}
		}},
		{"memory and compute", func(o *submitOptions) { o.minMem, o.minCU = "48GiB", 0.5 },
			func(s *market.JobSpec) { s.MinMemoryMiB, s.MinComputeUnits = 48<<10, 0.5 }},
		{"gang", func(o *submitOptions) { o.gpus, o.perNode = 8, 4 },
			func(s *market.JobSpec) { s.Cards, s.Layout = 8, market.Layout{Mode: market.LayoutPerNode, PerNode: 4} }},
		{"one node", func(o *submitOptions) { o.gpus, o.oneNode = 4, true },
			func(s *market.JobSpec) { s.Cards, s.Layout = 4, market.Layout{Mode: market.LayoutOneNode} }},
		{"mixed models", func(o *submitOptions) { o.gpus, o.mixedModels = 2, true },
			func(s *market.JobSpec) { s.Cards, s.MixedModels = 2, true }},
		{"preemptible", func(o *submitOptions) { o.preemptible = true },
			func(s *market.JobSpec) { s.Kind = market.KindPreemptible }},
		{"service", func(o *submitOptions) { o.service = true },
			func(s *market.JobSpec) { s.Kind = market.KindService }},
		{"replicas imply a service", func(o *submitOptions) { o.replicas, o.replicasSet = 3, true },
			func(s *market.JobSpec) { s.Kind, s.Replicas = market.KindService, 3 }},
		{"elastic", func(o *submitOptions) { o.gpus, o.elastic = 4, "2:16" },
			func(s *market.JobSpec) { s.Cards, s.Elastic = 4, &market.Elastic{Min: 2, Max: 16} }},
		{"duration, name, env", func(o *submitOptions) {
			o.duration, o.name, o.env = 2*time.Hour, "train v2", []string{"A=1", "B=x=y", "EMPTY="}
		}, func(s *market.JobSpec) {
			s.ExpectedDuration, s.Name = market.Duration(2*time.Hour), "train v2"
			s.Env = map[string]string{"A": "1", "B": "x=y", "EMPTY": ""}
		}},
		{"resources", func(o *submitOptions) { o.memory, o.pids, o.cpuWeight = "16GiB", 4096, 200 },
			func(s *market.JobSpec) {
				s.Resources = market.Resources{MemoryBytes: 16 << 30, Pids: 4096, CPUWeight: 200}
			}},
		{"memory in MiB", func(o *submitOptions) { o.memory = "1536MiB" },
			func(s *market.JobSpec) { s.MemoryBytes = 1536 << 20 }},
		{"memory 0 declares none", func(o *submitOptions) { o.memory = "0" }, func(*market.JobSpec) {}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, defaulted, err := buildSpec(opts(tc.mod), cat, nil)
			if err != nil {
				t.Fatal(err)
			}
			want := base
			tc.want(&want)
			if !reflect.DeepEqual(got, want) || defaulted {
				t.Errorf("got  %+v (defaulted %v)\nwant %+v", got, defaulted, want)
			}
		})
	}
}

// Every bad flag value is a usage error naming the flag, found before
// anything is sent.
func TestBuildSpecBadInput(t *testing.T) {
	cat := device.DefaultCatalog()
	cases := []struct {
		name string
		mod  func(*submitOptions)
		want []string
	}{
		{"no --gpus", func(o *submitOptions) { o.gpus = 0 }, []string{"--gpus: required"}},
		{"negative --gpus", func(o *submitOptions) { o.gpus = -1 }, []string{"--gpus: ", "between 1 and 4096"}},
		{"too many --gpus", func(o *submitOptions) { o.gpus = 5000 }, []string{"--gpus: ", "got 5000"}},
		{"no command", func(o *submitOptions) { o.command = nil }, []string{"no command", "after --"}},
		{"empty command", func(o *submitOptions) { o.command = []string{""} }, []string{"COMMAND: ", "required"}},
		{"empty model", func(o *submitOptions) { o.models = []string{""} }, []string{"--model: empty"}},
		{"unknown model", func(o *submitOptions) { o.models = []string{"h100"} }, []string{"--model: models[0]: ", `unknown model "h100"`, "h100-sxm-80g"}},
		{"pattern matching nothing", func(o *submitOptions) { o.models = []string{"h100-sxm-80g", "zz-*"} }, []string{"--model: models[1]: ", "matches no model"}},
		{"bad pattern", func(o *submitOptions) { o.models = []string{"h100-["} }, []string{"--model: ", "bad pattern"}},
		{"unknown vendor", func(o *submitOptions) { o.vendors = []string{"intel"} }, []string{"--vendor: vendors[0]: ", `unknown vendor "intel"`}},
		{"vendor without models", func(o *submitOptions) { o.models, o.vendors = []string{"h100-sxm-80g"}, []string{"amd"} }, []string{"--vendor: ", "none of the allowed models"}},
		{"memory without a unit", func(o *submitOptions) { o.minMem = "24" }, []string{"--min-mem: ", "no unit"}},
		{"memory in a bad unit", func(o *submitOptions) { o.minMem = "24 parsecs" }, []string{"--min-mem: ", `unknown unit "parsecs"`}},
		{"memory not whole MiB", func(o *submitOptions) { o.minMem = "0.5MiB" }, []string{"--min-mem: ", "whole number of MiB"}},
		{"negative memory", func(o *submitOptions) { o.minMem = "-1G" }, []string{"--min-mem: "}},
		{"memory no model has", func(o *submitOptions) { o.models, o.minMem = []string{"a100-*"}, "512GiB" }, []string{"--min-mem: ", "no allowed model has"}},
		{"memory no catalog model has, no price", func(o *submitOptions) { o.maxPriceSet, o.minMem = false, "512GiB" }, []string{"--max-price: required", "no catalog model"}},
		{"negative compute", func(o *submitOptions) { o.minCU = -1 }, []string{"--min-cu: "}},
		{"compute no model has", func(o *submitOptions) { o.minCU = 50 }, []string{"--min-cu: ", "no allowed model"}},
		{"two layouts", func(o *submitOptions) { o.gpus, o.perNode, o.oneNode = 4, 2, true }, []string{"--per-node and --one-node"}},
		{"negative per node", func(o *submitOptions) { o.perNode = -2 }, []string{"--per-node: must be at least 1"}},
		{"per node not dividing", func(o *submitOptions) { o.gpus, o.perNode = 6, 4 }, []string{"--per-node: 4 cards per node does not divide 6 cards"}},
		{"per node too many", func(o *submitOptions) { o.gpus, o.perNode = 32, 32 }, []string{"--per-node: must be between 1 and 16"}},
		{"one node too many", func(o *submitOptions) { o.gpus, o.oneNode = 32, true }, []string{"--per-node/--one-node: ", "no node holds more than 16"}},
		{"preemptible service", func(o *submitOptions) { o.preemptible, o.service = true, true }, []string{"--preemptible and --service"}},
		{"preemptible replicas", func(o *submitOptions) { o.preemptible, o.replicas, o.replicasSet = true, 2, true }, []string{"--preemptible and --service"}},
		{"zero replicas", func(o *submitOptions) { o.replicas, o.replicasSet = 0, true }, []string{"--replicas: must be at least 1"}},
		{"too many replicas", func(o *submitOptions) { o.replicas, o.replicasSet = 1000, true }, []string{"--replicas: ", "256"}},
		{"service gang", func(o *submitOptions) { o.service, o.gpus, o.perNode = true, 4, 2 }, []string{"--per-node/--one-node: ", "service"}},
		{"elastic without colon", func(o *submitOptions) { o.elastic = "4-8" }, []string{"--elastic: ", "MIN:MAX"}},
		{"elastic not numbers", func(o *submitOptions) { o.elastic = "a:8" }, []string{"--elastic: ", "whole numbers"}},
		{"elastic reversed", func(o *submitOptions) { o.elastic = "8:4" }, []string{"--elastic: ", "min <= max"}},
		{"elastic missing the size", func(o *submitOptions) { o.gpus, o.elastic = 1, "2:8" }, []string{"--gpus: ", "outside the elastic range"}},
		{"elastic one node", func(o *submitOptions) { o.oneNode, o.elastic = true, "1:2" }, []string{"--elastic: ", "one_node"}},
		{"negative duration", func(o *submitOptions) { o.duration = -time.Second }, []string{"--duration: must not be negative"}},
		{"long duration", func(o *submitOptions) { o.duration = 400 * 24 * time.Hour }, []string{"--duration: "}},
		{"env without =", func(o *submitOptions) { o.env = []string{"FOO"} }, []string{"--env: ", "NAME=VALUE"}},
		{"env twice", func(o *submitOptions) { o.env = []string{"A=1", "A=2"} }, []string{"--env: A given twice"}},
		{"env bad name", func(o *submitOptions) { o.env = []string{"1A=x"} }, []string{"--env: ", "bad variable name"}},
		{"env reserved", func(o *submitOptions) { o.env = []string{"GPUMESH_SHARE=3"} }, []string{"--env: ", "GPUMESH_"}},
		{"zero price", func(o *submitOptions) { o.maxPrice = 0 }, []string{"--max-price: ", "above 0"}},
		{"negative price", func(o *submitOptions) { o.maxPrice = -5 }, []string{"--max-price: "}},
		{"price over the cap", func(o *submitOptions) { o.maxPrice = 20000 }, []string{"--max-price: ", "10000"}},
		{"uncatalogued without price", func(o *submitOptions) { o.maxPriceSet, o.models = false, []string{"x-tesla-t4-15g"} }, []string{"--max-price: required", "x-tesla-t4-15g"}},
		{"bad id", func(o *submitOptions) { o.id = "Job One" }, []string{"--id: ", "lower-case"}},
		{"name with a newline", func(o *submitOptions) { o.name = "a\nb" }, []string{"--name: ", "printable"}},
		{"memory without a unit", func(o *submitOptions) { o.memory = "16" }, []string{"--memory: ", "no unit"}},
		{"memory in a bad unit", func(o *submitOptions) { o.memory = "16 furlongs" }, []string{"--memory: ", `unknown unit "furlongs"`}},
		{"memory too small", func(o *submitOptions) { o.memory = "1MiB" }, []string{"--memory: ", "8 MiB to 1 PiB, got 1 MiB"}},
		{"memory too large", func(o *submitOptions) { o.memory = "2048TiB" }, []string{"--memory: ", "to 1 PiB"}},
		{"negative memory", func(o *submitOptions) { o.memory = "-1G" }, []string{"--memory: "}},
		{"negative pids", func(o *submitOptions) { o.pids = -1 }, []string{"--pids: ", "got -1"}},
		{"too few pids", func(o *submitOptions) { o.pids = 4 }, []string{"--pids: ", "8 to 4194304, got 4"}},
		{"cpu weight too high", func(o *submitOptions) { o.cpuWeight = 10001 }, []string{"--cpu-weight: ", "1 to 10000, got 10001"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := buildSpec(opts(tc.mod), cat, nil)
			var ue usageError
			if !errors.As(err, &ue) {
				t.Fatalf("err = %v (%T), want a usage error", err, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("%q is not one line", err)
			}
		})
	}
}

func TestDefaultMaxPrice(t *testing.T) {
	cat := device.DefaultCatalog()
	highest := 0.0
	for _, m := range cat.Models() {
		highest = max(highest, m.DefaultPriceCNY())
	}
	cases := []struct {
		name string
		mod  func(*submitOptions)
		want float64
	}{
		// List prices of the catalog.
		{"one model", func(o *submitOptions) { o.models = []string{"h100-sxm-80g"} }, 22.50},
		{"a pattern", func(o *submitOptions) { o.models = []string{"rtx4090-*"} }, 3.02},
		{"two models", func(o *submitOptions) { o.models = []string{"a100-40g", "a100-80g"} }, 11.40},
		{"a memory floor drops the small one", func(o *submitOptions) { o.models, o.minMem = []string{"rtx4090-*"}, "40G" }, 3.02},
		{"a memory floor drops the big one's twin", func(o *submitOptions) { o.models, o.minMem = []string{"a100-*"}, "1G" }, 11.40},
		{"anything", nil, highest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := opts(tc.mod)
			o.maxPriceSet, o.maxPrice = false, 0
			spec, defaulted, err := buildSpec(o, cat, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !defaulted || spec.MaxPriceCNY != tc.want {
				t.Errorf("max price %v (defaulted %v), want %v", spec.MaxPriceCNY, defaulted, tc.want)
			}
		})
	}
	// Every allowed card at its default price is within the default.
	o := opts(func(o *submitOptions) { o.maxPriceSet, o.vendors = false, []string{"amd", "huawei"} })
	spec, _, err := buildSpec(o, cat, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range cat.Models() {
		if (m.Vendor == device.VendorAMD || m.Vendor == device.VendorHuawei) && m.DefaultPriceCNY() > spec.MaxPriceCNY {
			t.Errorf("%s asks %v by default, over the default max price %v", m.Key, m.DefaultPriceCNY(), spec.MaxPriceCNY)
		}
	}
}

func TestParseMiB(t *testing.T) {
	good := map[string]uint64{
		"24GiB": 24 << 10, "24G": 24 << 10, "24gb": 24 << 10, "24 GiB": 24 << 10, "24576MiB": 24576, "24576m": 24576,
		"1.5GiB": 1536, "1TiB": 1 << 20, "0": 0, "0G": 0, " 80g ": 80 << 10,
	}
	for in, want := range good {
		got, err := parseMiB(in)
		if err != nil || got != want {
			t.Errorf("parseMiB(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "G", "24", "-1G", "1e3G", "1..5G", "24GiBs", "0.1MiB", "nanG", "99999999999999T", "24 G B"} {
		if got, err := parseMiB(in); err == nil {
			t.Errorf("parseMiB(%q) = %d, want an error", in, got)
		} else if !strings.Contains(err.Error(), "want a size") && !strings.Contains(err.Error(), "MiB") && !strings.Contains(err.Error(), "too large") {
			t.Errorf("parseMiB(%q): %v does not say what is wanted", in, err)
		}
	}
}

// FuzzParseMiB: any input gives a size or an error, never a panic, and a
// size printed back in MiB parses to itself.
func FuzzParseMiB(f *testing.F) {
	for _, s := range []string{"24GiB", "1.5T", "0", "24576mib", "-1", "1e9G", ".5G", "9999999999999999999M"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		mib, err := parseMiB(s)
		if err != nil {
			if mib != 0 {
				t.Errorf("error with a size %d", mib)
			}
			return
		}
		if mib > 1<<40 {
			t.Errorf("%q: %d MiB over the bound", s, mib)
		}
		back, err := parseMiB(strconv.FormatUint(mib, 10) + "MiB")
		if err != nil || back != mib {
			t.Errorf("%q → %d MiB → %d, %v", s, mib, back, err)
		}
	})
}

// FuzzParseElasticAndEnv: the other flag parsers never panic and agree with
// what they accept.
func FuzzParseElasticAndEnv(f *testing.F) {
	for _, s := range []string{"4:16", ":", "a:b", "1:2:3", "A=1", "=x", "A==", " 3 : 4 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if el, err := parseElastic(s); err == nil && !strings.Contains(s, ":") {
			t.Errorf("%q gave %+v without a colon", s, el)
		}
		env, err := parseEnv([]string{s})
		if err == nil {
			k, v, _ := strings.Cut(s, "=")
			if env[k] != v || len(env) != 1 {
				t.Errorf("%q gave %v", s, env)
			}
		}
	})
}
