package fence

import (
	"container/heap"
	"errors"
	"time"
)

// target is what a fence kills: a process group and, when cgroup is not
// empty, every process in that cgroup v2 directory; or, before the node
// knew the group (prearm: pgid 0), every process whose environment marks
// it as marker's (AttemptEnv) and the groups they lead.
type target struct {
	pgid   int
	cgroup string
	marker string
}

// armed is one attempt the keeper holds.
type armed struct {
	key      string
	target   target
	deadline time.Time
	index    int // in table.order
}

// errTableFull is arm's answer to one key more than the table holds.
var errTableFull = errors.New("too many attempts armed")

// table is the keeper's state: the armed attempts by key and by deadline.
// It is pure (time comes in as data) and used by one goroutine.
type table struct {
	max   int
	byKey map[string]*armed
	order deadlines
}

func newTable(max int) *table {
	return &table{max: max, byKey: make(map[string]*armed)}
}

// arm sets key's target and deadline, replacing what key had. A new key
// when max keys are armed is refused with errTableFull.
func (t *table) arm(key string, tg target, deadline time.Time) error {
	if a, ok := t.byKey[key]; ok {
		a.target, a.deadline = tg, deadline
		heap.Fix(&t.order, a.index)
		return nil
	}
	if len(t.byKey) >= t.max {
		return errTableFull
	}
	a := &armed{key: key, target: tg, deadline: deadline}
	t.byKey[key] = a
	heap.Push(&t.order, a)
	return nil
}

// disarm forgets key; it reports whether key was armed.
func (t *table) disarm(key string) bool {
	a, ok := t.byKey[key]
	if !ok {
		return false
	}
	heap.Remove(&t.order, a.index)
	delete(t.byKey, key)
	return true
}

// next returns the earliest deadline; ok is false when nothing is armed.
func (t *table) next() (deadline time.Time, ok bool) {
	if len(t.order) == 0 {
		return time.Time{}, false
	}
	return t.order[0].deadline, true
}

// due removes and returns the attempts whose deadline is not after now,
// earliest first.
func (t *table) due(now time.Time) []armed {
	var out []armed
	for len(t.order) > 0 && !t.order[0].deadline.After(now) {
		a := heap.Pop(&t.order).(*armed)
		delete(t.byKey, a.key)
		out = append(out, *a)
	}
	return out
}

// drain removes and returns every attempt, earliest deadline first.
func (t *table) drain() []armed {
	out := make([]armed, 0, len(t.order))
	for len(t.order) > 0 {
		a := heap.Pop(&t.order).(*armed)
		out = append(out, *a)
	}
	clear(t.byKey)
	return out
}

func (t *table) len() int { return len(t.byKey) }

// deadlines is a min-heap of armed attempts by deadline (container/heap).
type deadlines []*armed

func (d deadlines) Len() int           { return len(d) }
func (d deadlines) Less(i, j int) bool { return d[i].deadline.Before(d[j].deadline) }
func (d deadlines) Swap(i, j int) {
	d[i], d[j] = d[j], d[i]
	d[i].index = i
	d[j].index = j
}
func (d *deadlines) Push(x any) {
	a := x.(*armed)
	a.index = len(*d)
	*d = append(*d, a)
}
func (d *deadlines) Pop() any {
	old := *d
	a := old[len(old)-1]
	old[len(old)-1] = nil
	*d = old[:len(old)-1]
	a.index = -1
	return a
}
