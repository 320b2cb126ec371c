package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/probe"
)

// scaledProbe is the probe scaled down 33500 times (an H100 is 0.1 GB/s),
// so that the CPU of a test computes a card's work in a few milliseconds
// even under the race detector; the ratios between models are the
// catalog's. The work is sized to take 300 ms at catalog speed: the
// answer's time is measured by the real clock, through the mesh, so the
// honest card passes unless that adds 300 ms, and the slow one reads as an
// RTX 4090 unless it adds 250 ms (a quarter of its 1 s).
func scaledProbe() probe.Config {
	cat := device.DefaultCatalog()
	return probe.Config{Target: 300 * time.Millisecond, Deadline: 5 * time.Second, Setup: -1, Words: 1 << 12, Blocks: 64, Catalog: cat,
		Bandwidth: func(model string) float64 {
			if m, ok := cat.Lookup(model); ok {
				return m.BandwidthGBs / scaleDown
			}
			return 0
		}}
}

// scaleDown is how many times slower than the catalog's the tests' cards
// and probes are.
const scaleDown = 33500

// A coordinator that verifies new suppliers places a job only on the one
// whose probe passed: the forger (wrong digests) is refused, the card that
// runs like an RTX 4090 is treated as one (and a job of H100s does not take
// it), and the record's explanation says why.
func TestOnlyVerifiedSuppliersWinAndAForgedOrSlowProbeIsHeldBack(t *testing.T) {
	fakes := map[int]*probe.Fake{
		1: {DefaultGBs: 3350.0 / scaleDown},              // an honest H100
		2: {DefaultGBs: 3350.0 / scaleDown, Forge: true}, // answers without doing the work
		3: {DefaultGBs: 1008.0 / scaleDown},              // an RTX 4090's bandwidth
	}
	i := 0
	sm := newSimMeshWith(t, func(c *Config) {
		c.Verify, c.Probe = market.VerifyNew, scaledProbe()
		if f, ok := fakes[i]; ok {
			c.Devices = []device.Backend{hwBackend{[]device.Card{h100(fmtUUID(i), "")}}}
			c.ProbeBackend = f
		}
		i++
	}, "", "", "", "")
	coord := sm.nodes[0]
	sm.neverCoordinate(sm.nodes[1], sm.nodes[2], sm.nodes[3])
	sm.waitBook(coord, 3)
	ctx := context.Background()
	rec, err := coord.Submit(ctx, market.JobSpec{ID: "verified", Cards: 1, Models: []string{"h100-*"}, MaxPriceCNY: 40, Command: []string{"sleep", "300"}})
	if err != nil {
		t.Fatal(err)
	}
	rec = waitState(t, coord, rec.ID, 30*time.Second, market.JobRunning)
	if p, _ := livePlacement(rec); p.Node != sm.nodes[1].ID().String() {
		t.Fatalf("placed on %s, want the honest supplier", p.Node)
	}
	// A second job of H100s: the honest card is taken; the other two are
	// held back, each for its own reason.
	rec, err = coord.Submit(ctx, market.JobSpec{ID: "second", Cards: 1, Models: []string{"h100-*"}, MaxPriceCNY: 40, Command: []string{"sleep", "300"}})
	if err != nil {
		t.Fatal(err)
	}
	why := map[string]string{}
	eventually(t, 20*time.Second, "the second job waits, its candidates held back by their probes", func() bool {
		rec, _ = coord.Job(ctx, rec.ID)
		if rec.Explanation == nil {
			return false
		}
		clear(why)
		for _, e := range rec.Explanation.Entries {
			if e.Reason == market.ReasonProbe {
				why[e.Node] = e.Detail
			}
		}
		return rec.State == market.JobPending && strings.Contains(rec.Reason, "failed this coordinator's verification probe: 2 free on 2 suppliers") && len(why) == 2
	})
	if d := why[sm.nodes[2].ID().String()]; !strings.Contains(d, "digest is wrong") {
		t.Errorf("the forger: %q, want its wrong digest named", d)
	}
	if d := why[sm.nodes[3].ID().String()]; !strings.Contains(d, "perform like rtx4090-24g") {
		t.Errorf("the slow card: %q, want it named as performing like an RTX 4090: %+v", d, rec.Explanation)
	}
	// The verdicts are in the coordinator's track records.
	probed := 0
	if err := coord.do(ctx, func() {
		for _, r := range coord.mk.TrackRecords() {
			if r.Probe != nil {
				probed++
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	if probed != 3 {
		t.Errorf("%d suppliers' verdicts in the track records, want 3", probed)
	}
}

func fmtUUID(i int) string {
	return "GPU-" + strings.Repeat(string(rune('0'+i)), 8) + "-0000-0000-0000-000000000000"
}
