package sim

import (
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/sim/workload"
)

// The availability trace is laid on the plan by name first, then in
// order; coordinators and the gateway never move; each supplier's events
// alternate down and up, 60 times faster than the trace.
func TestAvailabilitySchedule(t *testing.T) {
	plan := []Supplier{
		{Name: "ctl-1", Tier: TierControl, Coordinates: true},
		{Name: "ctl-2", Tier: TierControl, Coordinates: true},
		{Name: "idc-1", Tier: TierIDC},
		{Name: "cafe-1", Tier: TierCafe},
		{Name: "home-1", Tier: TierHome},
	}
	in := strings.Join([]string{
		"node,up_s,down_s",
		"home-1,0,60",       // by name: down at 1 s…
		"home-1,120,180",    // …back at 2 s…
		"home-1,180,240",    // …touching: still up, down at 4 s
		"a,30,90",           // the first left by name: idc-1, down until 0.5 s, down at 1.5 s
		"ctl-1,0,60",        // not a supplier that moves: drives cafe-1
		"z,0,60",            // no supplier left
		"home-1,240.01,600", // 0.2 ms outage once scaled: stretched to 1 ms; down at 10 s: past the run
	}, "\n")
	av, err := workload.ParseAvailability(strings.NewReader(in), "av.csv")
	if err != nil {
		t.Fatal(err)
	}
	events, use := AvailabilitySchedule(plan, av, 8*time.Second, 60)
	want := []TraceNode{{Node: "a", Supplier: "idc-1"}, {Node: "ctl-1", Supplier: "cafe-1"}, {Node: "home-1", Supplier: "home-1"}}
	if len(use.Drives) != len(want) || len(use.Unused) != 1 || use.Unused[0] != "z" {
		t.Fatalf("use %+v; want %v and z unused", use, want)
	}
	for i, w := range want {
		if use.Drives[i] != w {
			t.Errorf("drives[%d] = %+v, want %+v", i, use.Drives[i], w)
		}
	}
	got := map[string][]ChaosEvent{}
	for i, ev := range events {
		if i > 0 && ev.At < events[i-1].At {
			t.Fatalf("events out of order: %+v", events)
		}
		got[ev.Supplier] = append(got[ev.Supplier], ev)
	}
	check := func(name string, want ...ChaosEvent) {
		t.Helper()
		if len(got[name]) != len(want) {
			t.Errorf("%s: %+v, want %+v", name, got[name], want)
			return
		}
		for i := range want {
			want[i].Supplier = name
			if got[name][i] != want[i] {
				t.Errorf("%s event %d: %+v, want %+v", name, i, got[name][i], want[i])
			}
		}
	}
	check("idc-1", ChaosEvent{At: 0}, ChaosEvent{At: 500 * time.Millisecond, Up: true}, ChaosEvent{At: 1500 * time.Millisecond})
	check("cafe-1", ChaosEvent{At: time.Second})
	check("home-1",
		ChaosEvent{At: time.Second, Crash: true},
		ChaosEvent{At: 2 * time.Second, Up: true},
		ChaosEvent{At: 4 * time.Second, Crash: true},
		ChaosEvent{At: 4*time.Second + time.Millisecond, Up: true},
	)
	if len(got["ctl-1"])+len(got["ctl-2"]) > 0 {
		t.Errorf("a coordinator moves: %+v", events)
	}
}
