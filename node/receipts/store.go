package receipts

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/gpumesh/gpumesh/node/store"
)

// Store keeps receipts in the node's state file (bucket store.Receipts),
// so that they survive restarts: the receipts this node's attempts issued
// (its earnings) and those it accepted as a coordinator (its jobs' bills).
// Safe for concurrent use.
type Store struct{ st *store.Store }

// NewStore returns the receipts of st.
func NewStore(st *store.Store) *Store { return &Store{st: st} }

// stored is a receipt as the state file holds it.
type stored struct {
	Wire []byte `json:"wire"`
}

// key orders a job's receipts by share, epoch and sequence number.
func key(r Receipt) string {
	return fmt.Sprintf("%s\x00%06d/%020d/%010d", r.Job, r.Share, r.Epoch, r.Seq)
}

// Ops returns the writes that store rs (a countersigned receipt replaces
// the same receipt waiting for its countersignature).
func Ops(rs ...Receipt) []store.Op {
	ops := make([]store.Op, 0, len(rs))
	for _, r := range rs {
		ops = append(ops, store.Put(store.Receipts, key(r), stored{Wire: r.Marshal()}))
	}
	return ops
}

// Put stores rs.
func (s *Store) Put(rs ...Receipt) error { return s.st.Apply(Ops(rs...)) }

// Job returns every receipt stored of job, by share, epoch and seq. A
// stored record that does not decode is skipped and counted in bad.
func (s *Store) Job(job string) (rs []Receipt, bad int, err error) {
	err = s.st.ForEachPrefix(store.Receipts, job+"\x00", func(_ string, v []byte) error {
		if r, ok := decodeStored(v); ok {
			rs = append(rs, r)
		} else {
			bad++
		}
		return nil
	})
	return rs, bad, err
}

// Last returns the newest receipt stored of attempt a that keep accepts.
func (s *Store) Last(a Attempt, keep func(Receipt) bool) (Receipt, bool) {
	var last Receipt
	found := false
	prefix := fmt.Sprintf("%s\x00%06d/%020d/", a.Job, a.Share, a.Epoch)
	_ = s.st.ForEachPrefix(store.Receipts, prefix, func(_ string, v []byte) error {
		if r, ok := decodeStored(v); ok && (keep == nil || keep(r)) {
			last, found = r, true
		}
		return nil
	})
	return last, found
}

// Issued returns, for every attempt runner ran, the newest receipt it
// issued and the newest its coordinator countersigned (zero if none),
// among those signed at or after since.
func (s *Store) Issued(runner string, since time.Time) ([]Earned, error) {
	by := map[Attempt]*Earned{}
	var order []Attempt
	err := s.st.ForEach(store.Receipts, func(_ string, v []byte) error {
		r, ok := decodeStored(v)
		if !ok || r.Runner != runner {
			return nil
		}
		a := Attempt{r.Job, r.Share, r.Epoch}
		e := by[a]
		if e == nil {
			e = &Earned{}
			by[a] = e
			order = append(order, a)
		}
		e.Newest = r
		if len(r.CoordSig) > 0 {
			e.Accepted = r
		}
		return nil
	})
	out := make([]Earned, 0, len(order))
	for _, a := range order {
		if e := by[a]; !e.Newest.At.Before(since) {
			out = append(out, *e)
		}
	}
	return out, err
}

// Earned is what one attempt's receipts say it earned.
type Earned struct {
	// Accepted is the newest receipt the coordinator countersigned
	// (Seq 0: none yet); Newest the newest issued.
	Accepted, Newest Receipt
}

func decodeStored(v []byte) (Receipt, bool) {
	var s stored
	if json.Unmarshal(v, &s) != nil {
		return Receipt{}, false
	}
	r, err := Unmarshal(s.Wire)
	return r, err == nil
}
