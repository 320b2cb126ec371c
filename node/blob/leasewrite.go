package blob

import (
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// leaseWrites commits the lease file's changes in groups: the changes
// queued while a transaction is on its way to the disk go together in
// the next one, with one sync for all of them. Each attempt that ends
// keeps its outputs under a lease of its own, and many end together.
// The group's transaction runs under Store.mu, as each change's did
// alone: what collection reads of the leases in memory is what the file
// holds.
type leaseWrites struct {
	queue      []*leaseWrite
	committing bool // a goroutine commits the queue
}

// leaseWrite is one queued change.
type leaseWrite struct {
	// check runs under Store.mu before the transaction: an error refuses
	// this change alone.
	check func() error
	// apply writes the change in the group's transaction.
	apply func(tx *bolt.Tx) error
	// after changes the leases in memory, under Store.mu, once the
	// transaction is on disk.
	after func()
	taken bool
	done  chan error
}

// writeLease commits w with whatever else is queued, and returns once it
// is on disk or refused.
func (s *Store) writeLease(w *leaseWrite) error {
	w.done = make(chan error, 1)
	s.lw.Lock()
	s.lw.queue = append(s.lw.queue, w)
	if s.lw.committing {
		s.lw.Unlock()
		return <-w.done
	}
	s.lw.committing = true
	for len(s.lw.queue) > 0 {
		group := s.lw.queue
		s.lw.queue = nil
		s.lw.Unlock()
		s.commitLeases(group)
		s.lw.Lock()
	}
	s.lw.committing = false
	s.lw.Unlock()
	return <-w.done
}

// commitLeases writes the changes of group that pass their checks in one
// transaction, and answers every one of them.
func (s *Store) commitLeases(group []*leaseWrite) {
	if s.beforeLeaseCommit != nil {
		s.beforeLeaseCommit()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var ok []*leaseWrite
	for _, w := range group {
		var err error
		if s.closed {
			err = ErrClosed
		} else {
			err = w.check()
		}
		if err != nil {
			w.done <- err
			continue
		}
		ok = append(ok, w)
	}
	if len(ok) == 0 {
		return
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		for _, w := range ok {
			if err := w.apply(tx); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		err = fmt.Errorf("writing %d lease changes: %w", len(ok), err)
	}
	for _, w := range ok {
		if err == nil {
			w.after()
		}
		w.done <- err
	}
}
