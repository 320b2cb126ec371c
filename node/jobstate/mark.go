package jobstate

import "github.com/gpumesh/gpumesh/market"

// Mark orders the records one coordinator makes of a job: by term, then
// version. The zero Mark precedes every record's.
type Mark struct{ term, version uint64 }

// MarkOf returns rec's mark.
func MarkOf(rec market.JobRecord) Mark { return Mark{rec.Term, rec.Version} }

// atLeast reports whether m is o or comes after it.
func (m Mark) atLeast(o Mark) bool {
	return m.term > o.term || m.term == o.term && m.version >= o.version
}
