package gossip

import (
	"testing"
	"time"
)

func fired(tm Timer) bool {
	select {
	case <-tm.C():
		return true
	default:
		return false
	}
}

func TestManualClock(t *testing.T) {
	c := NewManualClock(t0)
	a, b := c.NewTimer(2*time.Second), c.NewTimer(time.Second)
	if due, ok := c.NextDue(); !ok || !due.Equal(t0.Add(time.Second)) || c.Pending() != 2 {
		t.Fatalf("next due %s %v, pending %d", due, ok, c.Pending())
	}
	c.Advance(999 * time.Millisecond)
	if fired(a) || fired(b) {
		t.Fatal("a timer fired early")
	}
	c.Advance(time.Millisecond)
	if !fired(b) || fired(a) {
		t.Fatal("want only the 1 s timer fired")
	}
	if a.Stop() != true || c.Pending() != 0 {
		t.Fatal("Stop of a pending timer")
	}
	c.Advance(time.Hour)
	if fired(a) {
		t.Fatal("a stopped timer fired")
	}
	if !fired(c.NewTimer(0)) || !fired(c.NewTimer(-time.Second)) {
		t.Fatal("a timer due now fires at once")
	}
	fire := c.NewTimer(time.Second)
	c.Advance(time.Second)
	if fire.Stop() || fired(fire) {
		t.Fatal("Stop after firing reports false and takes the value back")
	}
	c.Set(t0) // never backwards
	if !c.Now().Equal(t0.Add(time.Hour + 2*time.Second)) {
		t.Fatalf("now %s", c.Now())
	}
	if _, ok := c.NextDue(); ok {
		t.Fatal("no timer is pending")
	}
}

func TestSystemClock(t *testing.T) {
	c := SystemClock()
	if d := time.Since(c.Now()); d < 0 || d > time.Minute {
		t.Fatalf("system clock off by %s", d)
	}
	tm := c.NewTimer(time.Millisecond)
	select {
	case <-tm.C():
	case <-time.After(5 * time.Second):
		t.Fatal("system timer did not fire")
	}
	if c.NewTimer(time.Hour).Stop() != true {
		t.Fatal("Stop of a pending system timer")
	}
}
