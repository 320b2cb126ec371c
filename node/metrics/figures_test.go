package metrics

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/gossip"
	"github.com/gpumesh/gpumesh/node/api"
)

func TestFillFigures(t *testing.T) {
	fg := newFakeGossip()
	m := newTestMetrics(t, fg)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

	// 100 placements in the last 5 minutes, 10..1000 ms; one older.
	m.ObservePlacement(now.Add(-6*time.Minute), time.Hour)
	for i := 1; i <= 100; i++ {
		m.ObservePlacement(now.Add(-time.Duration(i)*time.Second), time.Duration(i*10)*time.Millisecond)
	}
	// Three reroutes in the last hour, one before.
	m.ObserveReroute(now.Add(-2*time.Hour), time.Minute)
	for _, d := range []time.Duration{2 * time.Second, 4 * time.Second, 9 * time.Second} {
		m.ObserveReroute(now.Add(-10*time.Minute), d)
	}
	// Gossip: 30 s of samples, 50 messages/s, 1 kB/s in, 2 kB/s out.
	base := fg.s
	accepted := base.Topics["/gpumesh/test/capacity/1"].Accepted
	for s := 0; s <= 30; s++ {
		ts := fg.s.Topics["/gpumesh/test/capacity/1"]
		ts.Accepted = accepted + uint64(50*s)
		fg.s.Topics["/gpumesh/test/capacity/1"] = ts
		fg.s.BytesIn = base.BytesIn + uint64(1000*s)
		fg.s.BytesOut = base.BytesOut + uint64(2000*s)
		m.Sample(now.Add(time.Duration(s-30) * time.Second))
	}

	st := &api.Status{Warnings: []string{}}
	m.Fill(now, st)
	wantPlacement := api.PlacementStatus{WindowSeconds: 300, Count: 100, P50Seconds: 0.5, P99Seconds: 0.99}
	if st.Jobs.Placement != wantPlacement {
		t.Errorf("Placement = %+v, want %+v", st.Jobs.Placement, wantPlacement)
	}
	wantReroutes := api.RerouteStatus{WindowSeconds: 3600, Count: 3, MedianSeconds: 4}
	if st.Jobs.Reroutes != wantReroutes {
		t.Errorf("Reroutes = %+v, want %+v", st.Jobs.Reroutes, wantReroutes)
	}
	g := st.Gossip
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"messages/s", g.MessagesPerSecond, 50},
		{"bytes in/s", g.BytesInPerSecond, 1000},
		{"bytes out/s", g.BytesOutPerSecond, 2000},
	} {
		if math.Abs(c.got-c.want) > 1e-9 {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if g.MeshPeers != 4 || g.Rejected["bad signature"] != 2 || g.Rejected["malformed"] != 1 || g.Ignored["stale seq"] != 3 {
		t.Errorf("Gossip = %+v, want 4 mesh peers, rejected bad signature 2 + malformed 1, ignored stale 3", g)
	}
	if len(st.Warnings) != 0 {
		t.Errorf("warnings with no skew: %q", st.Warnings)
	}

	// Messages from the future in the last minute warn of clock skew.
	ts := fg.s.Topics["/gpumesh/test/capacity/1"]
	ts.Ignored = map[string]uint64{"stale seq": 3, gossip.ReasonFuture.String(): 4}
	fg.s.Topics["/gpumesh/test/capacity/1"] = ts
	m.Sample(now.Add(time.Second))
	st = &api.Status{Warnings: []string{}}
	m.Fill(now.Add(time.Second), st)
	if len(st.Warnings) != 1 || !strings.HasPrefix(st.Warnings[0], "clock skew: 4 gossip message(s)") {
		t.Errorf("warnings = %q, want one clock skew warning counting 4", st.Warnings)
	}
	// A minute later with no new ones, the warning is gone.
	m.Sample(now.Add(62 * time.Second))
	m.Sample(now.Add(63 * time.Second))
	st = &api.Status{Warnings: []string{}}
	m.Fill(now.Add(63*time.Second), st)
	if len(st.Warnings) != 0 {
		t.Errorf("warnings a minute on = %q, want none", st.Warnings)
	}
}

func TestFillWithoutData(t *testing.T) {
	m := newTestMetrics(t, nil)
	st := &api.Status{}
	m.Fill(time.Now(), st)
	if st.Jobs.Placement.Count != 0 || st.Jobs.Placement.P99Seconds != 0 || st.Jobs.Reroutes.Count != 0 ||
		st.Gossip.MessagesPerSecond != 0 || st.Gossip.Rejected == nil {
		t.Errorf("Fill with nothing observed: %+v %+v", st.Jobs, st.Gossip)
	}
}
