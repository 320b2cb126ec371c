package gossip

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// askServer answers "echo" with its request twice, "fail" with an
// error, "big" with more than an ask's reply may hold, and "slow" once
// release is closed (or its call's context ends).
func askServer(release <-chan struct{}) func(context.Context, Message, func(string, []byte) error) error {
	return func(ctx context.Context, req Message, reply func(string, []byte) error) error {
		switch req.Kind {
		case "echo":
			for range 2 {
				if err := reply("echoed", req.Data); err != nil {
					return err
				}
			}
			return nil
		case "fail":
			return fmt.Errorf("no such thing as %s", req.Data)
		case "big":
			part := make([]byte, MaxDirectSize*2/3)
			for range 2 {
				if err := reply("part", part); err != nil {
					return err
				}
			}
			return nil
		case "slow":
			select {
			case <-release:
				return reply("slow", nil)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return fmt.Errorf("unknown call %q", req.Kind)
	}
}

// ask asks d's peer to for kind and returns the reply frames' kinds and
// data.
func ask(ctx context.Context, d *Direct, to peer.ID, kind, data string) ([]string, error) {
	var got []string
	err := d.Ask(ctx, to, kind, []byte(data), func(m Message) error {
		got = append(got, m.Kind+":"+string(m.Data))
		return nil
	})
	return got, err
}

func (d *Direct) askStreamsFrom(p peer.ID) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.askStreams[p]
}

func (d *Direct) keptAsks() int {
	d.asks.mu.Lock()
	defer d.asks.mu.Unlock()
	return len(d.asks.by)
}

// Asks made at once, one of them waiting on its handler, all go on one
// stream; each gets its own reply or error, and the slow one holds up no
// other.
func TestDirectAskAnswersConcurrentCallsOnOneKeptStream(t *testing.T) {
	tn := newTestNet(t)
	a, b := tn.addHost(), tn.addHost()
	tn.connect(a, b)
	da := startDirect(t, a, DirectConfig{})
	release := make(chan struct{})
	db := startDirect(t, b, DirectConfig{OnCall: askServer(release)})

	slow := make(chan error, 1)
	go func() {
		got, err := ask(context.Background(), da, b.ID(), "slow", "")
		if err == nil && strings.Join(got, ",") != "slow:" {
			err = fmt.Errorf("slow ask answered %q", got)
		}
		slow <- err
	}()
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 40 {
		wg.Go(func() {
			if i%4 == 0 {
				_, err := ask(context.Background(), da, b.ID(), "fail", fmt.Sprint(i))
				if !errors.Is(err, ErrRemote) || !strings.Contains(err.Error(), fmt.Sprintf("no such thing as %d", i)) {
					errs <- fmt.Errorf("ask %d: error %v, want the peer's own", i, err)
				}
				return
			}
			got, err := ask(context.Background(), da, b.ID(), "echo", fmt.Sprint(i))
			if want := fmt.Sprintf("echoed:%d,echoed:%d", i, i); err != nil || strings.Join(got, ",") != want {
				errs <- fmt.Errorf("ask %d: %q, %v; want %q", i, got, err, want)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	select {
	case err := <-slow:
		t.Fatalf("the slow ask ended before its handler could answer: %v", err)
	default:
	}
	close(release)
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	if n := db.askStreamsFrom(a.ID()); n != 1 {
		t.Fatalf("%d ask streams open from the caller after 41 asks, want 1", n)
	}
}

// A reply larger than an ask may hold is an error the caller sees, and the
// stream goes on.
func TestDirectAskRefusesAReplyTooLargeForIt(t *testing.T) {
	tn := newTestNet(t)
	a, b := tn.addHost(), tn.addHost()
	tn.connect(a, b)
	da := startDirect(t, a, DirectConfig{})
	startDirect(t, b, DirectConfig{OnCall: askServer(nil)})
	_, err := ask(context.Background(), da, b.ID(), "big", "")
	if !errors.Is(err, ErrRemote) || !strings.Contains(err.Error(), "does not fit an ask") {
		t.Fatalf("a reply over %d bytes: error %v", MaxDirectSize, err)
	}
	if got, err := ask(context.Background(), da, b.ID(), "echo", "after"); err != nil || len(got) != 2 {
		t.Fatalf("an ask after the refused one: %q, %v", got, err)
	}
}

// An ask whose context ends stops waiting; its late answer goes nowhere.
// With every slot taken, the peer answers at once that it is busy.
func TestDirectAskGivesUpWithItsContextAndIsToldWhenThePeerIsBusy(t *testing.T) {
	tn := newTestNet(t)
	a, b := tn.addHost(), tn.addHost()
	tn.connect(a, b)
	da := startDirect(t, a, DirectConfig{})
	release := make(chan struct{})
	startDirect(t, b, DirectConfig{OnCall: askServer(release), MaxInbound: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := ask(ctx, da, b.ID(), "slow", ""); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an ask past its deadline: %v", err)
	}
	// The slow handler still holds the one slot.
	if _, err := ask(context.Background(), da, b.ID(), "echo", "x"); err == nil || !strings.Contains(err.Error(), "busy") {
		t.Fatalf("an ask while the peer's one slot is taken: %v, want busy", err)
	}
	da.asks.mu.Lock()
	pending := len(da.asks.by[b.ID()].pending)
	da.asks.mu.Unlock()
	if pending != 0 {
		t.Fatalf("%d asks still pending after they ended", pending)
	}
	close(release)
	eventually(t, 5*time.Second, "an ask answered once the slot is free", func() bool {
		got, err := ask(context.Background(), da, b.ID(), "echo", "y")
		return err == nil && len(got) == 2
	})
}

// A stream that breaks fails the asks pending on it at once (not at their
// deadlines), and the next ask goes on a fresh stream.
func TestDirectAskFailsWhatIsPendingWhenItsStreamBreaks(t *testing.T) {
	tn := newTestNet(t)
	a, b := tn.addHost(), tn.addHost()
	tn.connect(a, b)
	da := startDirect(t, a, DirectConfig{})
	db, err := NewDirect(b, DirectConfig{Network: "test", OnCall: askServer(make(chan struct{}))})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := ask(context.Background(), da, b.ID(), "slow", "")
		done <- err
	}()
	eventually(t, 5*time.Second, "the slow ask at the peer", func() bool { return db.askStreamsFrom(a.ID()) == 1 })
	db.Close() // resets the stream its handler serves
	select {
	case err := <-done:
		if err == nil || errors.Is(err, ErrRemote) {
			t.Fatalf("an ask whose stream was reset: %v, want the stream's failure", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an ask whose stream was reset still waits")
	}
	startDirect(t, b, DirectConfig{OnCall: askServer(nil)})
	got, err := ask(context.Background(), da, b.ID(), "echo", "again")
	if err != nil || len(got) != 2 {
		t.Fatalf("an ask after the reset: %q, %v", got, err)
	}
}

// A peer that does not take asks (a node of an earlier release) is asked
// by Call, and remembered so.
func TestDirectAskCallsAPeerThatDoesNotTakeAsks(t *testing.T) {
	tn := newTestNet(t)
	a, b := tn.addHost(), tn.addHost()
	da := startDirect(t, a, DirectConfig{})
	db := startDirect(t, b, DirectConfig{OnCall: askServer(nil)})
	b.RemoveStreamHandler(db.askProto)
	tn.connect(a, b)
	for range 2 {
		got, err := ask(context.Background(), da, b.ID(), "echo", "old")
		if err != nil || strings.Join(got, ",") != "echoed:old,echoed:old" {
			t.Fatalf("an ask of a peer without asks: %q, %v", got, err)
		}
	}
	if da.takesAsks(b.ID()) {
		t.Fatal("the peer is not remembered as one that takes no asks")
	}
	if n := da.keptAsks(); n != 0 {
		t.Fatalf("%d ask streams kept to a peer without asks", n)
	}
}

// An ask stream idle for outIdle is closed at both ends, and an ask after
// that opens a fresh one.
func TestDirectAskClosesItsIdleStream(t *testing.T) {
	tn := newTestNet(t)
	a, b := tn.addHost(), tn.addHost()
	tn.connect(a, b)
	da := startDirect(t, a, DirectConfig{})
	db := startDirect(t, b, DirectConfig{OnCall: askServer(nil)})
	if _, err := ask(context.Background(), da, b.ID(), "echo", "1"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*outIdle, "the idle ask stream closed at both ends", func() bool {
		return da.keptAsks() == 0 && db.askStreamsFrom(a.ID()) == 0
	})
	if got, err := ask(context.Background(), da, b.ID(), "echo", "2"); err != nil || len(got) != 2 {
		t.Fatalf("an ask after the idle close: %q, %v", got, err)
	}
}
