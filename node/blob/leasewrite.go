package blob

import (
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// The lease file's changes commit in groups (internal/groupcommit): the
// changes queued while a transaction is on its way to the disk go
// together in the next one, with one sync for all of them. Each attempt
// that ends keeps its outputs under a lease of its own, and many end
// together. The group's transaction runs under Store.mu, as each change's
// did alone: what collection reads of the leases in memory is what the
// file holds.

// leaseWrite is one queued change.
type leaseWrite struct {
	// check, when set, runs under Store.mu before the transaction: an
	// error refuses this change alone.
	check func() error
	// apply writes the change in the group's transaction.
	apply func(tx *bolt.Tx) error
	// after changes the leases in memory, under Store.mu, once the
	// transaction is on disk.
	after func()
}

// commitLeases writes the changes of group that pass their checks in one
// transaction, and returns each one's outcome.
func (s *Store) commitLeases(group []*leaseWrite) []error {
	if s.beforeLeaseCommit != nil {
		s.beforeLeaseCommit()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	errs := make([]error, len(group))
	var ok []int
	for i, w := range group {
		switch {
		case s.closed:
			errs[i] = ErrClosed
		case w.check != nil:
			errs[i] = w.check()
		}
		if errs[i] == nil {
			ok = append(ok, i)
		}
	}
	if len(ok) == 0 {
		return errs
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		for _, i := range ok {
			if err := group[i].apply(tx); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		err = fmt.Errorf("writing %d lease changes: %w", len(ok), err)
	}
	for _, i := range ok {
		if err == nil {
			group[i].after()
		}
		errs[i] = err
	}
	return errs
}
