package market

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// The track book's rule, its memory and its persistence, driven directly
// (track_test.go drives it through placements).

var trackT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func trackNode(t *testing.T, mod func(*Config)) *Node {
	t.Helper()
	cfg := DefaultConfig("coord")
	if mod != nil {
		mod(&cfg)
	}
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n.now = trackT0
	return n
}

func approx(got, want, tol time.Duration) bool { return got >= want-tol && got <= want+tol }

func TestObservedMTBFOnlyLowersTheAdvertisedOne(t *testing.T) {
	n := trackNode(t, nil)
	b := n.coord.track
	sc := &scorer{duration: time.Hour, unknownMTBF: 6 * time.Hour, unknownCU: 0.1, track: b}
	adv := Availability{MTBF: Duration(720 * time.Hour)}

	// No history: the advertised figure, or the assumption when none.
	if got := sc.mtbf("fresh", adv); got != 720*time.Hour {
		t.Errorf("no history: MTBF %v, want the advertised 720h", got)
	}
	if got := sc.mtbf("fresh", Availability{}); got != 6*time.Hour {
		t.Errorf("no history, none advertised: MTBF %v, want UnknownMTBF 6h", got)
	}
	// Clean run time alone changes nothing.
	b.ran("clean", 10*time.Hour)
	b.ended("clean", false, 0)
	if got := sc.mtbf("clean", adv); got != 720*time.Hour {
		t.Errorf("clean record: MTBF %v, want 720h", got)
	}

	// One loss after 10 minutes' run: (10m + 6h) / 1.
	b.ran("flaky", 10*time.Minute)
	b.ended("flaky", true, 0)
	if got := sc.mtbf("flaky", adv); !approx(got, 6*time.Hour+10*time.Minute, time.Second) {
		t.Errorf("1 loss: MTBF %v, want 6h10m", got)
	}
	if p := sc.survival("flaky", adv); math.Abs(p-math.Exp(-1/(6+1.0/6))) > 1e-6 {
		t.Errorf("1 loss: survival %.4f, want %.4f", p, math.Exp(-1/(6+1.0/6)))
	}
	// Three in 30 minutes: (30m + 6h) / 3.
	b.ran("flaky", 20*time.Minute)
	b.ended("flaky", true, 0)
	b.ended("flaky", true, 0)
	if got := sc.mtbf("flaky", adv); !approx(got, 2*time.Hour+10*time.Minute, time.Second) {
		t.Errorf("3 losses: MTBF %v, want 2h10m", got)
	}
	// A supplier that advertised a figure below what it showed keeps its own.
	if got := sc.mtbf("flaky", Availability{MTBF: Duration(time.Hour)}); got != time.Hour {
		t.Errorf("advertised 1h, observed 2h10m: MTBF %v, want 1h", got)
	}
	// A long clean history outweighs one loss.
	b.ran("steady", 2000*time.Hour)
	b.ended("steady", true, 0)
	if got := sc.mtbf("steady", adv); got != 720*time.Hour {
		t.Errorf("1 loss in 2000h: MTBF %v, want the advertised 720h", got)
	}
}

func TestTrackRecordLossesFade(t *testing.T) {
	n := trackNode(t, nil)
	b := n.coord.track
	sc := &scorer{duration: time.Hour, unknownMTBF: 6 * time.Hour, unknownCU: 0.1, track: b}
	adv := Availability{MTBF: Duration(720 * time.Hour)}
	for range 3 {
		b.ended("flaky", true, 0)
	}
	fresh := sc.mtbf("flaky", adv)
	n.now = trackT0.Add(24 * time.Hour) // one half-life
	if got := sc.mtbf("flaky", adv); !approx(got, 2*fresh, time.Second) {
		t.Errorf("after one half-life: MTBF %v, want twice %v", got, fresh)
	}
	// The note says so while it still matters…
	if note := b.note("flaky", 720*time.Hour, true); !strings.Contains(note, "3 of 3 attempts lost, the last 24h ago; MTBF taken as 4h instead of the advertised 720h") {
		t.Errorf("note after a day: %q", note)
	}
	// …and nothing once it no longer does: 3 losses × 2^-9 weigh less
	// than 6h / 720h.
	n.now = trackT0.Add(9 * 24 * time.Hour)
	if got := sc.mtbf("flaky", adv); got != 720*time.Hour {
		t.Errorf("after nine half-lives: MTBF %v, want the advertised 720h", got)
	}
	if note := b.note("flaky", 720*time.Hour, true); note != "" {
		t.Errorf("note after nine days: %q, want none", note)
	}
	// Decay applies to what is reported too.
	recs := n.TrackRecords()
	if len(recs) != 1 || math.Abs(recs[0].Losses-3.0/512) > 1e-9 || recs[0].Lost != 3 {
		t.Errorf("records after nine half-lives: %+v, want 3 lost weighing 3/512", recs)
	}
}

func TestTrackBookEvictsTheOldestCleanRecordFirst(t *testing.T) {
	n := trackNode(t, func(c *Config) { c.TrackRecordLimit = 3 })
	b := n.coord.track
	at := func(d time.Duration) { n.now = trackT0.Add(d) }
	at(0)
	b.ended("lossy", true, 0) // the oldest, but with a loss
	at(time.Minute)
	b.ended("clean-old", false, time.Second)
	at(2 * time.Minute)
	b.ended("clean-new", false, time.Second)
	rd := n.Ready()
	n.Advance(rd)
	if len(rd.TrackRecords) != 3 {
		t.Fatalf("Ready carries %d records, want 3", len(rd.TrackRecords))
	}

	at(3 * time.Minute)
	b.ended("newcomer", false, time.Second)
	rd = n.Ready()
	if !slices.Equal(rd.ForgetTrackRecords, []string{"clean-old"}) {
		t.Errorf("forgotten %v, want [clean-old]: the oldest record without losses", rd.ForgetTrackRecords)
	}
	if len(rd.TrackRecords) != 1 || rd.TrackRecords[0].Node != "newcomer" {
		t.Errorf("changed records %+v, want the newcomer's", rd.TrackRecords)
	}
	n.Advance(rd)
	if n.HasReady() {
		t.Errorf("Ready left after Advance: %+v", n.Ready())
	}

	// Only losses left to choose from: the least recently seen goes.
	at(4 * time.Minute)
	b.ended("clean-new", true, 0)
	b.ended("newcomer", true, 0)
	n.Advance(n.Ready())
	at(5 * time.Minute)
	b.ended("another", true, 0)
	rd = n.Ready()
	if !slices.Equal(rd.ForgetTrackRecords, []string{"lossy"}) {
		t.Errorf("forgotten %v, want [lossy]: every record has losses, it is seen least recently", rd.ForgetTrackRecords)
	}
	var nodes []string
	for _, r := range n.TrackRecords() {
		nodes = append(nodes, r.Node)
	}
	if !slices.Equal(nodes, []string{"another", "clean-new", "newcomer"}) {
		t.Errorf("kept %v", nodes)
	}
}

func TestTrackRecordsOffWithLimitZero(t *testing.T) {
	n := trackNode(t, func(c *Config) { c.TrackRecordLimit = 0 })
	n.Advance(n.Ready()) // its first ad
	n.coord.track.ended("x", true, 0)
	if n.HasReady() || len(n.TrackRecords()) != 0 {
		t.Errorf("TrackRecordLimit 0 kept a record: %+v", n.TrackRecords())
	}
}

func TestTrackRecordChangedAfterReadyStaysDirty(t *testing.T) {
	n := trackNode(t, nil)
	b := n.coord.track
	b.ended("a", true, 0)
	rd := n.Ready()
	b.ended("a", false, time.Second) // after Ready, before Advance
	n.Advance(rd)
	rd = n.Ready()
	if len(rd.TrackRecords) != 1 || rd.TrackRecords[0].Ended != 1 {
		t.Fatalf("the change after Ready was not handed out again: %+v", rd.TrackRecords)
	}
	n.Advance(rd)
	if n.HasReady() {
		t.Errorf("still dirty after its Advance")
	}
}

func TestRestoreKeepsTheMostRecentRecords(t *testing.T) {
	recs := []TrackRecord{
		{Node: "old", Lost: 1, Losses: 1, At: trackT0},
		{Node: "mid", Lost: 2, Losses: 2, At: trackT0.Add(time.Hour)},
		{Node: "new", Ended: 4, RunSeconds: 60, At: trackT0.Add(2 * time.Hour)},
	}
	n := trackNode(t, func(c *Config) { c.TrackRecordLimit = 2; c.TrackRecords = recs })
	n.now = trackT0.Add(2 * time.Hour)
	got := n.TrackRecords()
	if len(got) != 2 || got[0].Node != "mid" || got[1].Node != "new" || got[0].Lost != 2 {
		t.Errorf("restored %+v, want mid and new", got)
	}
	if rd := n.Ready(); !slices.Equal(rd.ForgetTrackRecords, []string{"old"}) || len(rd.TrackRecords) != 0 {
		t.Errorf("first Ready: forget %v, records %+v; want only old forgotten", rd.ForgetTrackRecords, rd.TrackRecords)
	}
}

func TestTrackRecordValidate(t *testing.T) {
	for name, r := range map[string]TrackRecord{
		"no node":        {At: trackT0},
		"negative count": {Node: "a", Lost: -1, At: trackT0},
		"NaN losses":     {Node: "a", Losses: math.NaN(), At: trackT0},
		"infinite run":   {Node: "a", RunSeconds: math.Inf(1), At: trackT0},
		"no time":        {Node: "a"},
	} {
		if err := r.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, r)
		}
		cfg := DefaultConfig("coord")
		cfg.TrackRecords = []TrackRecord{r}
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "TrackRecords[0]") {
			t.Errorf("%s: New = %v, want an error naming TrackRecords[0]", name, err)
		}
	}
}

func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		720 * time.Hour: "720h", 26*time.Hour + 20*time.Minute: "26h", 2*time.Hour + 13*time.Minute: "2h13m",
		6*time.Hour + 20*time.Second: "6h", 40 * time.Minute: "40m", 35 * time.Second: "35s", 480 * time.Millisecond: "0.5s",
	} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%v) = %q, want %q", d, got, want)
		}
	}
}
