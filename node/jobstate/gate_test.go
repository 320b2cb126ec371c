package jobstate

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// at is the mark of a coordinator's record of job "j" at term and version.
func at(term, version uint64) Mark {
	return MarkOf(market.JobRecord{ID: "j", Term: term, Version: version})
}

func award(to string, share int) market.Message {
	return market.Message{From: "coord", To: to, Payload: &market.Award{Job: "j", Term: 1, Share: share, Epoch: 1}}
}

func stop(to string, share int) market.Message {
	return market.Message{From: "coord", To: to, Payload: &market.Stop{Job: "j", Share: share, Epoch: 1}}
}

func renewalAck(to string, share int) market.Message {
	return market.Message{From: "coord", To: to, Payload: &market.RenewalAck{Job: "j", Term: 1, Share: share, Epoch: 1}}
}

// describe names each message by its kind, destination and share.
func describe(msgs []market.Message) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, fmt.Sprintf("%T→%s/%d", m.Payload, m.To, attemptKeyOf(m).share))
	}
	return out
}

// sameMessages reports whether got holds exactly want, in order (the
// payloads are compared by identity: the very messages held).
func sameMessages(got, want []market.Message) bool {
	return slices.EqualFunc(got, want, func(a, b market.Message) bool { return a.To == b.To && a.Payload == b.Payload })
}

// An award waits for its record's commit, and a Stop of the same attempt
// (destination and share) after it waits behind it even though the
// record the Stop needs is committed already: the runner must never see
// the Stop before the award. Once the award's record commits both leave,
// award first.
func TestGateStopDoesNotOvertakeItsAward(t *testing.T) {
	g := NewGate()
	now := time.Unix(1000, 0)
	if out, dropped := g.Commit("j", at(1, 1), nil); len(out) != 0 || dropped != 0 {
		t.Fatalf("a commit with nothing held sent %v, dropped %d", describe(out), dropped)
	}
	a, s := award("r1", 0), stop("r1", 0)
	if g.Behind("j", a) {
		t.Fatalf("an award is behind a message before any is held")
	}
	if !g.Hold("j", at(1, 2), a, now) {
		t.Fatalf("an award whose record is not committed may go")
	}
	if !g.Behind("j", s) {
		t.Fatalf("a Stop of the held award's attempt is not behind it")
	}
	if !g.Hold("j", at(1, 1), s, now) {
		t.Fatalf("a Stop whose own record is committed overtook the award held before it")
	}
	// A commit that does not reach the award's record lets neither go.
	if out, _ := g.Commit("j", at(1, 1), nil); len(out) != 0 {
		t.Fatalf("sent %v before the award's record committed", describe(out))
	}
	out, dropped := g.Commit("j", at(1, 2), nil)
	if !sameMessages(out, []market.Message{a, s}) || dropped != 0 {
		t.Fatalf("sent %v (dropped %d); want the award, then the Stop", describe(out), dropped)
	}
	if w := g.Waiting(); len(w) != 0 {
		t.Errorf("jobs still waiting once all committed: %v", w)
	}
	// With nothing held, a message of that attempt whose record is
	// committed goes at once.
	if g.Hold("j", at(1, 2), stop("r1", 0), now) {
		t.Errorf("a committed Stop with nothing before it was held")
	}
}

// Messages wait only behind those of their own attempt: a renewal ack to
// another share of the job (or to the same share number on another
// runner) goes while an award waits, or its runner would fence. They
// leave a commit in the order they were held, per attempt.
func TestGateOtherAttemptsOfTheJobGoOn(t *testing.T) {
	g := NewGate()
	now := time.Unix(1000, 0)
	g.Commit("j", at(1, 4), nil)
	if !g.Hold("j", at(1, 5), award("r1", 0), now) {
		t.Fatalf("an uncommitted award may go")
	}
	for _, m := range []market.Message{renewalAck("r1", 1), renewalAck("r2", 0), stop("r2", 0)} {
		if g.Behind("j", m) {
			t.Errorf("%v is behind another attempt's award", describe([]market.Message{m}))
		}
		if g.Hold("j", at(1, 4), m, now) {
			t.Errorf("%v, committed, was held behind another attempt's award", describe([]market.Message{m}))
		}
	}
	// Another job is not held behind j either.
	other := market.Message{From: "coord", To: "r1", Payload: &market.Stop{Job: "k", Share: 0}}
	if g.Behind("k", other) {
		t.Errorf("a message of another job is behind j's award")
	}
	// Two attempts held, each behind its own record: the commit of the
	// second's record releases only it when the first needs a later one.
	g2 := NewGate()
	a1, a2 := award("r1", 0), award("r1", 1)
	g2.Hold("j", at(1, 7), a1, now)
	g2.Hold("j", at(1, 6), a2, now)
	if out, _ := g2.Commit("j", at(1, 6), nil); !sameMessages(out, []market.Message{a2}) {
		t.Errorf("commit of version 6 sent %v; want share 1's award only", describe(out))
	}
	if out, _ := g2.Commit("j", at(1, 7), nil); !sameMessages(out, []market.Message{a1}) {
		t.Errorf("commit of version 7 sent %v; want share 0's award", describe(out))
	}
}

// An award its coordinator gave up on while it waited for its commit is
// dropped when its record commits (the share went to a spare meanwhile),
// and counted, however long it waited; an award still waited for goes,
// however long it waited, as does a Stop. A nil withdrawn drops nothing.
func TestGateDropsWithdrawnAwardsOnCommit(t *testing.T) {
	now := time.Unix(1000, 0)
	g := NewGate()
	given, s, wanted := award("r1", 0), stop("r2", 0), award("r3", 1)
	g.Hold("j", at(1, 1), given, now)
	g.Hold("j", at(1, 1), s, now)
	g.Hold("j", at(1, 1), wanted, now.Add(-time.Hour))
	out, dropped := g.Commit("j", at(1, 1), func(a *market.Award) bool { return a.Share == 0 })
	if dropped != 1 {
		t.Errorf("dropped %d awards, want 1 (the one given up on)", dropped)
	}
	if !sameMessages(out, []market.Message{s, wanted}) {
		t.Errorf("sent %v; want the Stop and the award still waited for, not the one given up on", describe(out))
	}
	if w := g.Waiting(); len(w) != 0 {
		t.Errorf("the award given up on is still held: %v", w)
	}

	g = NewGate()
	g.Hold("j", at(1, 1), given, now)
	if out, dropped := g.Commit("j", at(1, 1), nil); dropped != 0 || !sameMessages(out, []market.Message{given}) {
		t.Errorf("nil withdrawn: sent %v, dropped %d; want the award sent", describe(out), dropped)
	}
}

// A caller waiting for a record's commit (a submission waiting for its
// replicas, an execution) hears it only once the commit reaches the
// record; one that gave up is forgotten and never hears.
func TestGateAwait(t *testing.T) {
	g := NewGate()
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	if g.Awaited("j") {
		t.Fatalf("awaited before anyone waits")
	}
	ch := g.Await("j", at(2, 3))
	if closed(ch) || !g.Awaited("j") {
		t.Fatalf("await: closed %v, awaited %v; want open and awaited", closed(ch), g.Awaited("j"))
	}
	if w := g.Waiting(); !slices.Equal(w, []string{"j"}) {
		t.Errorf("waiting %v; want the awaited job", w)
	}
	g.Commit("j", at(2, 2), nil)
	if closed(ch) {
		t.Fatalf("closed by the commit of an earlier version")
	}
	g.Commit("j", at(1, 9), nil)
	if closed(ch) {
		t.Fatalf("closed by the commit of a lower term")
	}
	g.Commit("j", at(2, 3), nil)
	if !closed(ch) || g.Awaited("j") {
		t.Fatalf("after the commit: closed %v, awaited %v; want closed and not awaited", closed(ch), g.Awaited("j"))
	}
	// A lower commit after a higher one does not lower the mark.
	g.Commit("j", at(1, 9), nil)
	if ch := g.Await("j", at(2, 3)); !closed(ch) {
		t.Errorf("await of a committed record is not closed at once")
	}

	gone, stays := g.Await("j", at(3, 1)), g.Await("j", at(3, 1))
	g.Unwait("j", gone)
	if !g.Awaited("j") {
		t.Fatalf("unwait of one waiter dropped the other")
	}
	g.Unwait("j", stays)
	if g.Awaited("j") {
		t.Fatalf("awaited once every waiter gave up")
	}
	g.Commit("j", at(3, 1), nil)
	if closed(gone) || closed(stays) {
		t.Errorf("a waiter that gave up was closed by the commit")
	}
}

// Forget drops a job's commit mark only when nothing waits on it: a
// message held (or a waiter) still needs the mark, or a message of
// another attempt committed already would wait again.
func TestGateForgetKeepsTheMarkWhileMessagesWait(t *testing.T) {
	g := NewGate()
	now := time.Unix(1000, 0)
	g.Commit("j", at(1, 5), nil)
	g.Hold("j", at(1, 6), award("r1", 0), now)
	g.Forget("j")
	if g.Hold("j", at(1, 5), renewalAck("r2", 1), now) {
		t.Fatalf("the commit mark was forgotten while an award was held")
	}
	g.Commit("j", at(1, 6), nil)
	ch := g.Await("j", at(1, 9))
	g.Forget("j")
	if g.Hold("j", at(1, 6), renewalAck("r2", 1), now) {
		t.Fatalf("the commit mark was forgotten while a caller waited")
	}
	g.Unwait("j", ch)
	g.Forget("j")
	if !g.Hold("j", at(1, 6), renewalAck("r2", 1), now) {
		t.Errorf("the commit mark was kept once nothing waited on it")
	}
}

// Messages that wait too long are found (Stale, by the oldest held) and
// dropped whole; waiters stay.
func TestGateStaleAndDrop(t *testing.T) {
	g := NewGate()
	t0 := time.Unix(1000, 0)
	g.Hold("j", at(1, 1), award("r1", 0), t0)
	g.Hold("j", at(1, 1), stop("r1", 0), t0.Add(time.Minute))
	g.Hold("k", at(1, 1), award("r1", 0), t0.Add(time.Minute))
	ch := g.Await("j", at(1, 1))
	if s := g.Stale(t0.Add(time.Second)); !slices.Equal(s, []string{"j"}) {
		t.Fatalf("stale %v; want j, whose oldest message waited since t0", s)
	}
	if n := g.Drop("j"); n != 2 {
		t.Errorf("dropped %d messages, want 2", n)
	}
	if !g.Awaited("j") {
		t.Errorf("drop discarded a waiter")
	}
	w := g.Waiting()
	slices.Sort(w)
	if !slices.Equal(w, []string{"j", "k"}) {
		t.Errorf("waiting %v; want j (its waiter) and k", w)
	}
	g.Commit("j", at(1, 1), nil)
	select {
	case <-ch:
	default:
		t.Errorf("the waiter that stayed was not closed by the commit")
	}
}

// Only what may start an attempt or acknowledge an end waits for a
// commit.
func TestGated(t *testing.T) {
	for _, c := range []struct {
		p    market.Payload
		want bool
	}{
		{&market.Award{}, true},
		{&market.Start{}, true},
		{&market.EndAck{}, true},
		{&market.Stop{}, false},
		{&market.RenewalAck{}, false},
		{&market.Superseded{}, false},
	} {
		if got := Gated(c.p); got != c.want {
			t.Errorf("Gated(%T) = %v, want %v", c.p, got, c.want)
		}
	}
}

// A message's attempt is its destination and share; a message about no
// one share has share -1.
func TestAttemptKeyOf(t *testing.T) {
	for _, c := range []struct {
		m    market.Message
		want attemptOf
	}{
		{award("r1", 2), attemptOf{"r1", 2}},
		{stop("r2", 0), attemptOf{"r2", 0}},
		{renewalAck("r1", 3), attemptOf{"r1", 3}},
		{market.Message{To: "r1", Payload: &market.Start{Share: 4}}, attemptOf{"r1", 4}},
		{market.Message{To: "r1", Payload: &market.EndAck{Share: 5}}, attemptOf{"r1", 5}},
		{market.Message{To: "r1", Payload: &market.Superseded{Job: "j"}}, attemptOf{"r1", -1}},
	} {
		if got := attemptKeyOf(c.m); got != c.want {
			t.Errorf("attemptKeyOf(%T to %s) = %+v, want %+v", c.m.Payload, c.m.To, got, c.want)
		}
	}
}
