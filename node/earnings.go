package node

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/metrics"
	"github.com/gpumesh/gpumesh/node/store"
)

// What a supplier earned. Each attempt this node runs carries the price it
// was awarded at and, once it ends, its card-seconds: the figures its
// coordinator bills the job's owner. While it runs, its card-seconds so far
// are its cards times the time since it started (the usage its renewals
// report). The ledger counts what each attempt's card-seconds rose by since
// it was last counted, at its price, on the local day it is counted, by
// card model; it keeps what it counted of each attempt until the attempt
// is closed, in the state file beside the days' and models' sums, so a
// restart neither loses nor counts anything twice. At most the rise of
// earningsFlushEvery can be lost with a crash (it is written then, and with
// every change of an attempt).

// The keys of the store's Earnings bucket.
const (
	earningsDay     = "day/"     // day/2006-01-02/MODEL → api.Earned
	earningsTotal   = "total/"   // total/MODEL → api.Earned
	earningsAttempt = "attempt/" // attempt/NAME → card-seconds counted (float64)
	earningsSince   = "since"    // the first earning (time.Time)
)

// earningsKeepDays is how many local days the ledger keeps day by day;
// older days count only in the totals.
const earningsKeepDays = 14

// earningsFlushEvery is how often the counting of running attempts is
// written to the state file.
const earningsFlushEvery = 30 * time.Second

// ledger is the driver's count of this node's earnings. Not safe for
// concurrent use.
type ledger struct {
	loc     *time.Location
	days    map[dayModel]api.Earned
	totals  map[string]api.Earned
	since   time.Time
	counted map[string]float64 // attempt name → card-seconds counted
	dirty   map[string]bool    // store keys changed since the last ops
	flushed time.Time
}

type dayModel struct{ day, model string }

func newLedger(loc *time.Location) *ledger {
	return &ledger{loc: loc, days: map[dayModel]api.Earned{}, totals: map[string]api.Earned{},
		counted: map[string]float64{}, dirty: map[string]bool{}}
}

func (l *ledger) day(t time.Time) string { return t.In(l.loc).Format(time.DateOnly) }

// add counts attempt name's card-seconds so far, cardSeconds, at price
// CNY per card-hour, on now's day for model, and returns the rise (zero
// when they did not rise).
func (l *ledger) add(now time.Time, name, model string, cardSeconds, price float64) api.Earned {
	d := cardSeconds - l.counted[name]
	if !(d > 0) || price < 0 {
		return api.Earned{}
	}
	e := api.Earned{CNY: d / 3600 * price, CardSeconds: d}
	l.counted[name] = cardSeconds
	l.dirty[earningsAttempt+name] = true
	k := dayModel{l.day(now), model}
	l.days[k] = l.days[k].Add(e)
	l.dirty[earningsDay+k.day+"/"+model] = true
	l.totals[model] = l.totals[model].Add(e)
	l.dirty[earningsTotal+model] = true
	if l.since.IsZero() {
		l.since = now
		l.dirty[earningsSince] = true
	}
	return e
}

// close forgets what was counted of an attempt that is over for good.
func (l *ledger) close(name string) {
	if _, ok := l.counted[name]; ok {
		delete(l.counted, name)
		l.dirty[earningsAttempt+name] = true
	}
}

// ops returns the writes that bring the state file up to the ledger, days
// older than earningsKeepDays before now dropped, and marks it clean.
func (l *ledger) ops(now time.Time) []store.Op {
	oldest := l.day(now.AddDate(0, 0, -earningsKeepDays))
	for k := range l.days {
		if k.day < oldest {
			delete(l.days, k)
			l.dirty[earningsDay+k.day+"/"+k.model] = true
		}
	}
	keys := make([]string, 0, len(l.dirty))
	for key := range l.dirty {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	var ops []store.Op
	for _, key := range keys {
		var v any
		switch {
		case key == earningsSince:
			v = l.since
		case strings.HasPrefix(key, earningsAttempt):
			if c, ok := l.counted[strings.TrimPrefix(key, earningsAttempt)]; ok {
				v = c
			}
		case strings.HasPrefix(key, earningsTotal):
			if e, ok := l.totals[strings.TrimPrefix(key, earningsTotal)]; ok {
				v = e
			}
		case strings.HasPrefix(key, earningsDay):
			day, model, _ := strings.Cut(strings.TrimPrefix(key, earningsDay), "/")
			if e, ok := l.days[dayModel{day, model}]; ok {
				v = e
			}
		}
		if v == nil {
			ops = append(ops, store.Delete(store.Earnings, key))
		} else {
			ops = append(ops, store.Put(store.Earnings, key, v))
		}
	}
	clear(l.dirty)
	l.flushed = now
	return ops
}

// load reads the ledger back from the state file. Counters of attempts not
// in open (the attempts the state file still holds) are dropped: those
// attempts were closed. An entry that cannot be read is reported and
// dropped.
func (l *ledger) load(st *store.Store, open map[string]bool, bad func(key string, err error)) error {
	return st.ForEach(store.Earnings, func(key string, raw []byte) error {
		var err error
		switch {
		case key == earningsSince:
			err = json.Unmarshal(raw, &l.since)
		case strings.HasPrefix(key, earningsAttempt):
			name := strings.TrimPrefix(key, earningsAttempt)
			var c float64
			if err = json.Unmarshal(raw, &c); err == nil {
				if open[name] {
					l.counted[name] = c
				} else {
					l.dirty[key] = true // deleted with the next write
				}
			}
		case strings.HasPrefix(key, earningsTotal):
			var e api.Earned
			if err = json.Unmarshal(raw, &e); err == nil {
				l.totals[strings.TrimPrefix(key, earningsTotal)] = e
			}
		case strings.HasPrefix(key, earningsDay):
			day, model, ok := strings.Cut(strings.TrimPrefix(key, earningsDay), "/")
			var e api.Earned
			if err = json.Unmarshal(raw, &e); err == nil && ok {
				l.days[dayModel{day, model}] = e
			} else if err == nil {
				err = fmt.Errorf("a day key without a model")
			}
		default:
			err = fmt.Errorf("unknown key")
		}
		if err != nil {
			bad(key, err)
			l.dirty[key] = true
			delete(l.counted, strings.TrimPrefix(key, earningsAttempt))
		}
		return nil
	})
}

// summary is what was earned today, this week (from Monday) and in all,
// by model, at now.
func (l *ledger) summary(now time.Time) *api.Earnings {
	local := now.In(l.loc)
	midnight := time.Date(local.Year(), local.Month(), local.Day(), 0, 0, 0, 0, l.loc)
	monday := midnight.AddDate(0, 0, -((int(local.Weekday()) + 6) % 7))
	today, weekStart := midnight.Format(time.DateOnly), monday.Format(time.DateOnly)
	out := &api.Earnings{TodaySince: midnight, WeekSince: monday, Since: l.since, ByModel: []api.ModelEarned{}}
	by := map[string]*api.ModelEarned{}
	row := func(model string) *api.ModelEarned {
		if by[model] == nil {
			by[model] = &api.ModelEarned{Model: model}
		}
		return by[model]
	}
	for model, e := range l.totals {
		row(model).Total = e
		out.Total = out.Total.Add(e)
	}
	for k, e := range l.days {
		if k.day >= weekStart && k.day <= today {
			r := row(k.model)
			r.Week = r.Week.Add(e)
			out.Week = out.Week.Add(e)
			if k.day == today {
				r.Today = r.Today.Add(e)
				out.Today = out.Today.Add(e)
			}
		}
	}
	for _, r := range by {
		out.ByModel = append(out.ByModel, *r)
	}
	slices.SortFunc(out.ByModel, func(a, b api.ModelEarned) int { return cmp.Compare(a.Model, b.Model) })
	return out
}

// earn counts an attempt the market changed (persist, in the transaction
// that writes the attempt).
func (n *Node) earn(now time.Time, a market.Attempt) {
	name := attemptName(a.Job, a.Share, a.Epoch)
	n.countEarned(n.ledger.add(now, name, n.modelOf(a.Cards), a.CardSeconds, a.PriceCNY))
	if a.State == market.AttemptClosed {
		n.ledger.close(name)
	}
}

// accrue counts the card-seconds the attempts running here have used so
// far, and writes the ledger every earningsFlushEvery. Driver only.
func (n *Node) accrue(now time.Time) {
	for _, a := range n.mk.Attempts() {
		if (a.State != market.AttemptRunning && a.State != market.AttemptStopping) || a.StartedAt.IsZero() {
			continue
		}
		used := float64(len(a.Cards)) * max(0, now.Sub(a.StartedAt).Seconds())
		n.countEarned(n.ledger.add(now, attemptName(a.Job, a.Share, a.Epoch), n.modelOf(a.Cards), used, a.PriceCNY))
	}
	if len(n.ledger.dirty) > 0 && now.Sub(n.ledger.flushed) >= earningsFlushEvery {
		if err := n.storeApply(n.ledger.ops(now)); err != nil {
			n.log.Error("cannot write the earnings; the last ones may not survive a restart", "err", err)
		}
	}
}

// countEarned feeds a rise to the metrics.
func (n *Node) countEarned(e api.Earned) {
	if e.CardSeconds > 0 {
		_ = n.obs.m.AddBilling(metrics.SideEarned, e.CardSeconds, e.CNY)
	}
}

// modelOf is the model of an attempt's cards, as this node knows them.
func (n *Node) modelOf(cards []string) string {
	if len(cards) == 0 {
		return "unknown"
	}
	if m, ok := n.devices.Model(cards[0]); ok {
		return m
	}
	return "unknown"
}

// loadEarnings reads the ledger back; attempts are the attempts the state
// file holds after readAttempts.
func (n *Node) loadEarnings(attempts []market.Attempt) error {
	open := make(map[string]bool, len(attempts))
	for _, a := range attempts {
		open[attemptName(a.Job, a.Share, a.Epoch)] = true
	}
	n.ledger = newLedger(time.Local)
	return n.ledger.load(n.store, open, func(key string, err error) {
		n.log.Error("unreadable earnings entry in the state file; dropped", "key", key, "err", err)
	})
}
