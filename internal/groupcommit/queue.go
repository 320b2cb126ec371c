// Package groupcommit gathers the writes that come while one commit is on
// its way to the disk, to go together in the next: many writers, one sync
// for each group of them. node/store's state file and node/blob's leases
// commit through it.
package groupcommit

import "sync"

// Queue holds the items waiting for a commit, in the order they came, and
// whether a goroutine is committing. The first waiter to find none
// commits what is queued, again until nothing is; the others wait for the
// commit that holds theirs.
type Queue[T any] struct {
	// commit writes a group, in order, and returns each item's outcome
	// (len(items) of them). It runs without the Queue's lock, on one
	// goroutine at a time.
	commit func(items []T) []error

	mu         sync.Mutex
	queue      []*entry[T]
	committing bool
}

type entry[T any] struct {
	item  T
	taken bool // in a group being committed, or committed; under Queue.mu
	done  chan error
}

// New returns a Queue whose groups commit writes.
func New[T any](commit func(items []T) []error) *Queue[T] {
	return &Queue[T]{commit: commit}
}

// Add queues item behind every item added before, and returns wait, which
// must be called: it commits what is queued unless another goroutine is
// at it or item's group was committed already, and returns item's
// outcome. A caller that must order its writes with what it decided
// queues under its own lock and waits after letting it go.
func (q *Queue[T]) Add(item T) (wait func() error) {
	e := &entry[T]{item: item, done: make(chan error, 1)}
	q.mu.Lock()
	q.queue = append(q.queue, e)
	q.mu.Unlock()
	return func() error { return q.await(e) }
}

// Do queues item and waits for its outcome.
func (q *Queue[T]) Do(item T) error { return q.Add(item)() }

// Len is how many items wait for a commit (tests).
func (q *Queue[T]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queue)
}

func (q *Queue[T]) await(e *entry[T]) error {
	q.mu.Lock()
	if q.committing || e.taken {
		q.mu.Unlock()
		return <-e.done
	}
	q.committing = true
	for len(q.queue) > 0 {
		group := q.queue
		q.queue = nil
		items := make([]T, len(group))
		for i, g := range group {
			g.taken = true
			items[i] = g.item
		}
		q.mu.Unlock()
		errs := q.commit(items)
		for i, g := range group {
			g.done <- errs[i]
		}
		q.mu.Lock()
	}
	q.committing = false
	q.mu.Unlock()
	return <-e.done
}
