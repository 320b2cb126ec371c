package api

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market/owner"
)

// eventBackend fans events out to the streams subscribed.
type eventBackend struct {
	backendless
	mu   sync.Mutex
	subs []chan Event
}

func (b *eventBackend) Subscribe() (<-chan Event, func()) {
	ch := make(chan Event, 16)
	b.mu.Lock()
	b.subs = append(b.subs, ch)
	b.mu.Unlock()
	return ch, func() {}
}

func (b *eventBackend) emit(evs ...Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, ch := range b.subs {
		for _, ev := range evs {
			ch <- ev
		}
	}
}

func (b *eventBackend) subscribers() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.subs)
}

func ownerKey(t *testing.T, seed byte) owner.Key {
	t.Helper()
	k, err := owner.KeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// A job's events reach its owner whole. Anyone else, a caller without an
// owner token included, learns that an auction, a placement or an end
// happened, not of which job or why, and nothing of a mere change of
// state; the events of the node's own cards and of membership reach
// everyone whole.
func TestEventsAreScopedToTheJobsOwner(t *testing.T) {
	alice, bob := ownerKey(t, 1), ownerKey(t, 2)
	b := &eventBackend{}
	cfg := Config{OwnerTokens: map[string]owner.Key{"alice-token-0123456789": alice, "bob-token-0123456789ab": bob}}
	srv := httptest.NewServer(Handler(cfg, b, nil))
	defer srv.Close()

	type stream struct {
		name string
		sc   *bufio.Scanner
	}
	var streams []stream
	for _, who := range []struct{ name, token string }{{"alice", "alice-token-0123456789"}, {"bob", "bob-token-0123456789ab"}, {"no token", ""}} {
		req, _ := http.NewRequest("GET", srv.URL+"/v1/events", nil)
		if who.token != "" {
			req.Header.Set("Authorization", "Bearer "+who.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d", who.name, resp.StatusCode)
		}
		streams = append(streams, stream{who.name, bufio.NewScanner(resp.Body)})
	}
	deadline := time.Now().Add(5 * time.Second)
	for b.subscribers() < len(streams) {
		if time.Now().After(deadline) {
			t.Fatal("the streams did not subscribe")
		}
		time.Sleep(5 * time.Millisecond) // polling interval
	}
	code := 0
	b.emit(
		Event{Type: "job", Job: "j-alice", State: "running", From: "placing", Reason: "placed", Epoch: 1, Owner: string(alice.ID())},
		Event{Type: "auction", Job: "j-alice", State: "placing", From: "bidding", Reason: "cleared at 7.1", Epoch: 1, Owner: string(alice.ID())},
		Event{Type: "placement", Job: "j-alice", Node: "n1", Share: 0, Epoch: 1, Model: "a100-80g", Cards: 2, PriceCNY: 9},
		Event{Type: "end", Job: "j-alice", Node: "n1", Epoch: 1, State: "done", Cause: "exited", ExitCode: &code},
		Event{Type: "member", Peer: "n9", State: "alive"}, // the last one: each stream reads up to it
	)
	read := func(s stream) []Event {
		var got []Event
		for s.sc.Scan() {
			line := s.sc.Text()
			if !strings.HasPrefix(line, "data: ") {
				continue
			}
			var ev Event
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev); err != nil {
				t.Fatalf("%s: %q: %v", s.name, line, err)
			}
			got = append(got, ev)
			if ev.Type == "member" {
				return got
			}
		}
		t.Fatalf("%s: the stream ended: %v", s.name, s.sc.Err())
		return nil
	}
	summary := func(evs []Event) string {
		var parts []string
		for _, ev := range evs {
			parts = append(parts, ev.Type+":"+ev.Job+":"+ev.Reason)
		}
		return strings.Join(parts, " ")
	}
	want := map[string]string{
		"alice":    "job:j-alice:placed auction:j-alice:cleared at 7.1 placement:j-alice: end:j-alice: member::",
		"bob":      "auction:: placement:j-alice: end:j-alice: member::",
		"no token": "auction:: placement:j-alice: end:j-alice: member::",
	}
	for _, s := range streams {
		got := read(s)
		if summary(got) != want[s.name] {
			t.Errorf("%s got %s\nwant %s", s.name, summary(got), want[s.name])
		}
		for _, ev := range got {
			if ev.Type == "auction" && s.name != "alice" && (!ev.Hidden || ev.Epoch != 0 || ev.State != "placing") {
				t.Errorf("%s: another owner's auction %+v: want it hidden, with its state alone", s.name, ev)
			}
			if ev.Type == "placement" && (ev.Model != "a100-80g" || ev.Cards != 2 || ev.PriceCNY != 9 || ev.Hidden) {
				t.Errorf("%s: this node's placement %+v: want it whole", s.name, ev)
			}
		}
	}
}
