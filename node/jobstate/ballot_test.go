package jobstate

import (
	"encoding/json"
	"testing"

	"github.com/gpumesh/gpumesh/market"
)

// A node's state file holds the claims it granted as ballots: the
// encoding must not change.
func TestBallotJSON(t *testing.T) {
	b := Ballot{Term: 7, Coordinator: "12D3KooWclaimant"}
	data, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"term":7,"coordinator":"12D3KooWclaimant"}`; string(data) != want {
		t.Fatalf("encoded %s, want %s", data, want)
	}
	var back Ballot
	if err := json.Unmarshal(data, &back); err != nil || back != b {
		t.Fatalf("decoded %+v (%v), want %+v", back, err, b)
	}
}

// A ballot outranks by term, then peer ID, never itself.
func TestBallotOutranks(t *testing.T) {
	for _, c := range []struct {
		a, b Ballot
		want bool
	}{
		{Ballot{2, "a"}, Ballot{1, "z"}, true},
		{Ballot{1, "z"}, Ballot{2, "a"}, false},
		{Ballot{2, "b"}, Ballot{2, "a"}, true},
		{Ballot{2, "a"}, Ballot{2, "b"}, false},
		{Ballot{2, "a"}, Ballot{2, "a"}, false},
		{Ballot{1, "a"}, Ballot{}, true},
	} {
		if got := c.a.Outranks(c.b); got != c.want {
			t.Errorf("%+v.Outranks(%+v) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
	rec := market.JobRecord{ID: "j", Term: 4, Coordinator: "p", Version: 9}
	if got := BallotOf(rec); got != (Ballot{4, "p"}) {
		t.Errorf("BallotOf = %+v", got)
	}
}

// One job is claimed by one path at a time.
func TestAdopting(t *testing.T) {
	var a Adopting
	if !a.Begin("j") {
		t.Fatalf("the first Begin failed")
	}
	if a.Begin("j") {
		t.Fatalf("a second Begin of one job succeeded")
	}
	if !a.Begin("k") {
		t.Fatalf("Begin of another job failed")
	}
	a.End("j")
	if !a.Begin("j") {
		t.Fatalf("Begin after End failed")
	}
}
