package node

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/gossip"
	"github.com/libp2p/go-libp2p/core/peer"
)

// A peer that does not answer (a frozen process: a send to it blocks until
// its timeout) holds up only the messages to it. With one pool of send
// workers for every destination, the workers all ended up waiting on the
// frozen peer, and renewal acks to the other runners came too late: they
// fenced themselves.
func TestALaneWaitingOnAFrozenPeerDoesNotHoldUpTheOthers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	frozen, other := peer.ID("frozen"), peer.ID("other")
	release := make(chan struct{})
	delivered := make(chan peer.ID, 64)
	deliver := func(ctx context.Context, to peer.ID, msgs []gossip.Out) error {
		if to == frozen {
			select { // blocks as a send to a frozen process does
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		delivered <- to
		return nil
	}
	const workers = 4
	ls := newLanes(ctx, &wg, workers, deliver, func(peer.ID, int, error) {})
	// The driver hands over a batch for the frozen peer on every step, more
	// than there are workers, then one for another runner.
	wg.Add(1) // as the driver is: the caller of push is counted
	for range 4 * workers {
		ls.push(frozen, []gossip.Out{{Kind: kindMarket, Data: []byte("renewal ack")}})
	}
	ls.push(other, []gossip.Out{{Kind: kindMarket, Data: []byte("renewal ack")}})
	wg.Done()
	select {
	case got := <-delivered:
		if got != other {
			t.Fatalf("delivered to %s first", got)
		}
	case <-time.After(sendTimeout - time.Second): // a deadline, not synchronization: the frozen lane waits until it is released
		t.Fatal("the message to the other runner waited behind the frozen peer's")
	}
	close(release)
	// Once the frozen peer answers, its queue leaves, in one send.
	select {
	case got := <-delivered:
		if got != frozen {
			t.Fatalf("delivered to %s, want the frozen peer", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the frozen peer's messages did not leave once it answered")
	}
}

// A lane sends everything queued for its destination, in one send while it
// fits, and starts again for messages queued after it emptied.
func TestALaneSendsItsQueueInOrder(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	var mu sync.Mutex
	var got []string
	done := make(chan struct{}, 16)
	deliver := func(_ context.Context, _ peer.ID, msgs []gossip.Out) error {
		mu.Lock()
		for _, m := range msgs {
			got = append(got, string(m.Data))
		}
		mu.Unlock()
		done <- struct{}{}
		return nil
	}
	ls := newLanes(ctx, &wg, 2, deliver, func(peer.ID, int, error) {})
	wg.Add(1)
	ls.push("p", []gossip.Out{{Data: []byte("a")}, {Data: []byte("b")}})
	ls.push("p", []gossip.Out{{Data: []byte("c")}})
	wg.Done()
	deadline := time.After(5 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == 3 {
			break
		}
		select {
		case <-done:
		case <-deadline:
			t.Fatalf("delivered %v, want a b c", got)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if got[0] != "a" || got[1] != "b" || got[2] != "c" {
		t.Fatalf("delivered %v, want a b c in order", got)
	}
}
