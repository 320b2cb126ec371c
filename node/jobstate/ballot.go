package jobstate

import "github.com/gpumesh/gpumesh/market"

// Ballot is a would-be or actual coordinator of a job and its term. A node
// persists the claims it granted as ballots (JSON), so its encoding is
// part of the state file.
type Ballot struct {
	Term        uint64 `json:"term"`
	Coordinator string `json:"coordinator"`
}

// Outranks reports whether b outranks o (market.Outranks: the higher
// term, then the greater peer ID).
func (b Ballot) Outranks(o Ballot) bool {
	return market.Outranks(b.Term, b.Coordinator, o.Term, o.Coordinator)
}

// BallotOf returns the ballot of rec's coordinator.
func BallotOf(rec market.JobRecord) Ballot { return Ballot{rec.Term, rec.Coordinator} }
