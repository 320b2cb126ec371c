package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/market"
)

// hwBackend reports fixed "real" cards: an NVIDIA H100 with a UUID and a
// serial, as NVML would, so that the node's ad carries evidence.
type hwBackend struct{ cards []device.Card }

func (b hwBackend) Name() string { return "hw" }
func (b hwBackend) Cards(context.Context) ([]device.Card, error) {
	return append([]device.Card(nil), b.cards...), nil
}
func (b hwBackend) Watch(context.Context, chan<- device.HealthEvent) error { return nil }

func h100(uuid, serial string) device.Card {
	m, _ := device.DefaultCatalog().Lookup("h100-sxm-80g")
	return device.Card{ID: uuid, UUID: uuid, Vendor: device.VendorNVIDIA, Model: m.Key, Name: "NVIDIA H100 80GB HBM3", Known: true,
		Backend: "hw", MemoryMiB: 81559, MemoryFreeMiB: 81559, ComputeUnits: m.ComputeUnits, Health: device.Healthy(),
		Evidence: &device.Evidence{Serial: serial, BoardPartNumber: "692-2G520-0200-000", PCIDeviceID: 0x233010de, DriverVersion: "550.54.15"}}
}

func TestTwoNodesClaimingOneCardAreBothHeldBack(t *testing.T) {
	// Node 0 coordinates; nodes 1 and 2 both claim the card GPU-dup (2
	// copied the other's evidence); node 3 joins later with a card of its
	// own.
	cards := map[int][]device.Card{
		1: {h100("GPU-11111111-1111-1111-1111-111111111111", "1650000000001")},
		2: {h100("GPU-11111111-1111-1111-1111-111111111111", "1650000000002")},
		3: {h100("GPU-33333333-3333-3333-3333-333333333333", "1650000000003")},
	}
	i := 0
	sm := newSimMeshWith(t, func(c *Config) {
		if hw, ok := cards[i]; ok {
			c.Devices = []device.Backend{hwBackend{hw}}
		}
		c.Verify = market.VerifyNever // probes: probe_test.go
		i++
	}, "", "", "")
	coord := sm.nodes[0]
	// Whichever node coordinates the job has heard both suppliers' ads.
	for _, n := range sm.nodes {
		for _, s := range sm.nodes[1:] {
			if s == n {
				continue
			}
			eventually(t, 10*time.Second, "every node has the suppliers' ads", func() bool {
				_, ok := n.gossip.Book().Get(s.ID(), time.Now())
				return ok
			})
		}
	}
	ctx := context.Background()
	rec, err := coord.Submit(ctx, market.JobSpec{ID: "dup", Cards: 1, Models: []string{"h100-*"}, MaxPriceCNY: 40, Command: []string{"sleep", "300"}})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the job waits, saying the suppliers are held back", func() bool {
		rec, _ = coord.Job(ctx, rec.ID)
		return rec.State == market.JobPending && strings.Contains(rec.Reason, "held back")
	})
	if !strings.Contains(rec.Reason, "2 suppliers") {
		t.Errorf("reason %q: want both suppliers counted", rec.Reason)
	}
	if rec.Explanation == nil {
		t.Fatal("no explanation")
	}
	held := map[string]bool{}
	for _, e := range rec.Explanation.Entries {
		if e.Reason == market.ReasonDuplicate {
			held[e.Node] = true
			if !strings.Contains(e.Detail, "uuid:gpu-11111111-1111-1111-1111-111111111111") || !strings.Contains(e.Detail, "also claimed by") {
				t.Errorf("explain: %q does not say which card and who else claims it", e.Detail)
			}
		}
	}
	if len(held) != 2 || !held[sm.nodes[1].ID().String()] || !held[sm.nodes[2].ID().String()] {
		t.Errorf("explanation holds back %v, want both suppliers: %+v", held, rec.Explanation.Entries)
	}
	// One of the two leaves: the other is asked again and runs the job.
	sm.nodes[2].Close()
	sm.nodes[2] = nil
	eventually(t, 20*time.Second, "the job runs on the node left holding the card", func() bool {
		rec, _ = coord.Job(ctx, rec.ID)
		return rec.State == market.JobRunning
	})
	if got := rec.Placements[len(rec.Placements)-1].Node; got != sm.nodes[1].ID().String() {
		t.Errorf("placed on %s, want node 1", got)
	}
}
