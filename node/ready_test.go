package node

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/node/store"
)

// failingBackend is a vendor whose cards are here but cannot be read.
type failingBackend struct{}

func (failingBackend) Name() string { return "nvml" }
func (failingBackend) Cards(context.Context) ([]device.Card, error) {
	return nil, errors.New("driver/library version mismatch")
}
func (failingBackend) Watch(context.Context, chan<- device.HealthEvent) error { return nil }

// wantReady checks n's readiness: the checks named in failing fail with
// messages holding the given words, the others pass.
func wantReady(t *testing.T, n *Node, failing map[string][]string) {
	t.Helper()
	got := n.Ready()
	for _, name := range []string{"store", "devices", "mesh"} {
		err, ok := got[name]
		switch words, fail := failing[name]; {
		case !ok:
			t.Errorf("no %s check in %v", name, got)
		case !fail && err != nil:
			t.Errorf("%s: %v, want ready", name, err)
		case fail && err == nil:
			t.Errorf("%s ready, want it to fail", name)
		case fail:
			for _, w := range words {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: %q does not say %q", name, err, w)
				}
			}
		}
	}
}

func TestReadyChecksAreReal(t *testing.T) {
	sm := newSimMesh(t, "a100-80g:1", "a100-80g:1")
	first, joiner := sm.nodes[0], sm.nodes[1]
	wantReady(t, first, nil)
	wantReady(t, joiner, nil)

	// The store: closed under the node, it no longer reads back.
	first.store.Close()
	wantReady(t, first, map[string][]string{"store": {"state.db", "not open"}})

	// The mesh: a node told to --join that finds itself alone is not
	// ready; the first node, told to join none, is ready alone.
	if err := sm.net.Crash(first.ID()); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the joiner is alone", func() bool { return joiner.Mesh().NumAlive() == 1 })
	wantReady(t, joiner, map[string][]string{"mesh": {"alone", "1 --join address"}})

	// The devices: a backend whose vendor is here but cannot be read.
	broken := newSimMeshWith(t, func(c *Config) { c.Devices = append(c.Devices, failingBackend{}) }, "a100-80g:1")
	wantReady(t, broken.nodes[0], map[string][]string{"devices": {"nvml", "driver/library version mismatch"}})
}

// A write that fails makes the store check fail until one succeeds.
func TestReadyStoreNamesAFailedWrite(t *testing.T) {
	sm := newSimMesh(t, "")
	n := sm.nodes[0]
	err := n.storeApply(nil) // nothing written: nothing learnt
	if err != nil || n.storeReady() != nil {
		t.Fatalf("empty write: %v, ready %v", err, n.storeReady())
	}
	if err := n.storeApply([]store.Op{store.Put("no-such-bucket", "k", 1)}); err == nil {
		t.Fatal("a write to an unknown bucket succeeded")
	}
	if err := n.storeReady(); err == nil || !strings.Contains(err.Error(), "the last write failed") || !strings.Contains(err.Error(), "no-such-bucket") {
		t.Fatalf("after a failed write: %v", err)
	}
	if err := n.storeApply([]store.Op{store.Put(store.Meta, "probe", 1)}); err != nil {
		t.Fatal(err)
	}
	if err := n.storeReady(); err != nil {
		t.Fatalf("after a good write: %v", err)
	}
}
