package gossip

import (
	"slices"
	"sync"
	"time"
)

// Clock is where the gossip package reads the time and gets its timers, so
// that tests and simulations can drive it without sleeping. Implementations
// are safe for concurrent use.
type Clock interface {
	Now() time.Time
	// NewTimer returns a timer that sends the time on its channel once, d
	// after now (at once for d <= 0).
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer from a Clock.
type Timer interface {
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it stopped
	// a pending timer. After Stop no value arrives on C.
	Stop() bool
}

// SystemClock returns the Clock of the operating system.
func SystemClock() Clock { return systemClock{} }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (t systemTimer) C() <-chan time.Time { return t.t.C }
func (t systemTimer) Stop() bool          { return t.t.Stop() }

// ManualClock is a Clock whose time moves only when Advance or Set is
// called, for tests and simulations. Timers due at or before the new time
// fire, in order, during the call. The zero value is not usable; call
// NewManualClock.
type ManualClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*manualTimer
}

// NewManualClock returns a ManualClock reading start.
func NewManualClock(start time.Time) *ManualClock { return &ManualClock{now: start} }

// Now returns the clock's current time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer returns a timer due d after the clock's current time; one with
// d <= 0 has already fired.
func (c *ManualClock) NewTimer(d time.Duration) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &manualTimer{clock: c, due: c.now.Add(d), ch: make(chan time.Time, 1)}
	if d <= 0 {
		t.ch <- c.now
		return t
	}
	c.timers = append(c.timers, t)
	return t
}

// Advance moves the clock forward by d and fires the timers that fall due.
func (c *ManualClock) Advance(d time.Duration) { c.Set(c.Now().Add(d)) }

// Set moves the clock to t (never backwards: an earlier t leaves the time
// unchanged) and fires the timers that fall due.
func (c *ManualClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.now = t
	}
	slices.SortFunc(c.timers, func(a, b *manualTimer) int { return a.due.Compare(b.due) })
	n := 0
	for _, tm := range c.timers {
		if tm.due.After(c.now) {
			c.timers[n] = tm
			n++
			continue
		}
		tm.ch <- tm.due // buffered 1, sent at most once
	}
	clear(c.timers[n:])
	c.timers = c.timers[:n]
}

// Pending returns the number of timers that have not fired or stopped.
func (c *ManualClock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// NextDue returns when the earliest pending timer fires, if any is pending.
func (c *ManualClock) NextDue() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.timers) == 0 {
		return time.Time{}, false
	}
	due := c.timers[0].due
	for _, t := range c.timers[1:] {
		if t.due.Before(due) {
			due = t.due
		}
	}
	return due, true
}

type manualTimer struct {
	clock *ManualClock
	due   time.Time
	ch    chan time.Time
}

func (t *manualTimer) C() <-chan time.Time { return t.ch }

func (t *manualTimer) Stop() bool {
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.Index(c.timers, t)
	if i < 0 {
		select { // fired already: take the value back, as time.Timer does
		case <-t.ch:
		default:
		}
		return false
	}
	c.timers = slices.Delete(c.timers, i, i+1)
	return true
}
