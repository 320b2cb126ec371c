package metrics

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/node/api"
)

func TestCardWarnings(t *testing.T) {
	cards := []api.Card{
		{Card: device.Card{ID: "GPU-1", Model: "h100-sxm-80g"}, Healthy: true},
		{Card: device.Card{ID: "GPU-2", Model: "h100-sxm-80g", Health: device.Unhealthy("Xid 79")}},
		{Card: device.Card{ID: "GPU-3", Model: "rtx4090-48g"}},
	}
	want := []string{
		"card GPU-2 (h100-sxm-80g) unhealthy: Xid 79; it is withdrawn from the mesh",
		"card GPU-3 (rtx4090-48g) unhealthy; it is withdrawn from the mesh",
	}
	if got := CardWarnings(cards); !reflect.DeepEqual(got, want) {
		t.Errorf("CardWarnings = %q, want %q", got, want)
	}
}

func TestFlaps(t *testing.T) {
	f := NewFlaps(10*time.Minute, 3)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	// peer A: 3 changes in 4 minutes → flapping; B: 2 changes → not; C: 3
	// changes over 20 minutes → not.
	for _, m := range []int{0, 2, 4} {
		f.Changed("A", at(m))
	}
	f.Changed("B", at(1))
	f.Changed("B", at(3))
	for _, m := range []int{0, 10, 20} {
		f.Changed("C", at(m))
	}
	if got, want := f.Warnings(at(5)), []string{"peer A flapping: 3 state changes in the last 10m0s"}; !reflect.DeepEqual(got, want) {
		t.Errorf("at 5m: %q, want %q", got, want)
	}
	// At 10m the change at 0m has left A's window.
	if got := f.Warnings(at(10)); len(got) != 0 {
		t.Errorf("at 10m: %q, want none", got)
	}
	// A window later, everyone quiet is forgotten.
	f.Warnings(at(40))
	if len(f.changes) != 0 {
		t.Errorf("%d peers still tracked after a quiet window", len(f.changes))
	}
}

func TestFlapsMemoryIsBounded(t *testing.T) {
	f := NewFlaps(time.Hour, 3)
	f.maxPeers = 100
	for i := range 1000 {
		for k := range 50 {
			f.Changed(fmt.Sprintf("p%d", i), t0.Add(time.Duration(i*50+k)*time.Millisecond))
		}
	}
	if len(f.changes) > 100 {
		t.Errorf("%d peers tracked, want at most 100", len(f.changes))
	}
	for p, ts := range f.changes {
		if len(ts) > 12 {
			t.Errorf("peer %s holds %d changes, want at most 4×threshold", p, len(ts))
		}
	}
	// The most recent peer is still there and flapping.
	w := f.Warnings(t0.Add(50 * time.Second))
	if len(w) == 0 || w[len(w)-1] != "peer p999 flapping: 12 or more state changes in the last 1h0m0s" {
		t.Errorf("warnings end with %q", w[max(len(w)-1, 0):])
	}
}
