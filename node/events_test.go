package node

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
)

// sseEvents reads the events of n's GET /v1/events, as a caller without
// an owner token (the dashboard opened without one), onto a channel.
func sseEvents(t *testing.T, n *Node) <-chan api.Event {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+n.APIAddr()+"/v1/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan api.Event, 256)
	done := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		resp.Body.Close()
		<-done
	})
	sc := bufio.NewScanner(resp.Body)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), ": gpumesh events") {
		t.Fatalf("no event stream: %q", sc.Text())
	}
	go func() {
		defer close(done)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var ev api.Event
				if json.Unmarshal([]byte(data), &ev) == nil {
					select {
					case out <- ev:
					case <-ctx.Done():
						return
					}
				}
			}
		}
	}()
	return out
}

// waitEvent returns the first event from ch that match accepts.
func waitEvent(t *testing.T, ch <-chan api.Event, what string, match func(api.Event) bool) api.Event {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev := <-ch:
			if match(ev) {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %s event within 20s", what)
		}
	}
}

// A supplier that coordinates none of the jobs it runs still shows its
// cards' activity as it happens: an attempt placed on its cards and its
// end, to a caller without an owner token. Its coordinator's events of the
// job reach that caller without the job's identity.
func TestEventsShowTheSuppliersCardsAtWork(t *testing.T) {
	sm := newSimMeshWith(t, withAPI(func(_ int, c *Config) { c.Prices = map[string]float64{"a100-80g": 30} }), "", "a100-80g:2")
	coord, sup := sm.nodes[0], sm.nodes[1]
	sm.neverCoordinate(sup)
	sm.waitBook(coord, 2)
	atSupplier, atCoord := sseEvents(t, sup), sseEvents(t, coord)
	if _, err := coord.Submit(context.Background(), market.JobSpec{AllowSimulated: true, ID: "busy-cards", Cards: 2, MaxPriceCNY: 40, Command: []string{"sh", "-c", "sleep 0.5; exit 3"}}); err != nil {
		t.Fatal(err)
	}
	self := sup.ID().String()
	placed := waitEvent(t, atSupplier, "placement on the supplier", func(ev api.Event) bool { return ev.Type == "placement" })
	if placed.Job != "busy-cards" || placed.Node != self || placed.Model != "a100-80g" || placed.Cards != 2 || placed.PriceCNY != 30 || placed.Epoch == 0 {
		t.Errorf("placement on the supplier: %+v", placed)
	}
	ended := waitEvent(t, atSupplier, "end on the supplier", func(ev api.Event) bool { return ev.Type == "end" })
	if ended.Job != "busy-cards" || ended.Node != self || ended.ExitCode == nil || *ended.ExitCode != 3 || ended.Cause != string(market.CauseExited) {
		t.Errorf("end on the supplier: %+v", ended)
	}
	// The coordinator's steps of the job, hidden from a caller who is not
	// its owner.
	for _, kind := range []string{"auction", "placement", "end"} {
		ev := waitEvent(t, atCoord, kind+" at the coordinator", func(ev api.Event) bool { return ev.Type == kind })
		if !ev.Hidden || ev.Job != "" || ev.Reason != "" {
			t.Errorf("the coordinator's %s event to a caller without an owner: %+v; want it hidden", kind, ev)
		}
		if kind == "end" && ev.State != string(market.JobFailed) {
			t.Errorf("the coordinator's end: %+v, want state failed", ev)
		}
	}
}
