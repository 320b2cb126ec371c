package receipts

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/store"
)

func TestReceiptsSurviveARestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	st, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	coord, runner := newParty(t, 1), newParty(t, 2)
	rs := NewStore(st)
	is := NewIssuer("lab", runner.id, runner.key, 5*time.Second, func(a Attempt) (Receipt, bool) { return rs.Last(a, nil) })
	a := Attempt{"j1", 0, 1}
	terms := Terms{Owner: "o1x", Coordinator: coord.id, Term: 1, Cards: 1, PriceCNY: 18}
	r1 := is.Issue(a, terms, 5, false, t0)
	r1.Accept(coord.key)
	r2 := is.Issue(a, terms, 10, false, t0.Add(5*time.Second)) // issued, not yet countersigned
	if err := rs.Put(r1, r2); err != nil {
		t.Fatal(err)
	}
	st.Close()

	st, err = store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rs = NewStore(st)
	got, bad, err := rs.Job("j1")
	if err != nil || bad != 0 || len(got) != 2 || got[0].Hash() != r1.Hash() || len(got[0].CoordSig) == 0 || got[1].Seq != 2 {
		t.Fatalf("after a restart: %d receipts (%d bad), %v", len(got), bad, err)
	}
	// The issuer of the restarted runner continues the chain.
	is = NewIssuer("lab", runner.id, runner.key, 5*time.Second, func(a Attempt) (Receipt, bool) { return rs.Last(a, nil) })
	r3 := is.Issue(a, terms, 15, true, t0.Add(10*time.Second))
	if r3.Seq != 3 || r3.Prev != r2.Hash() {
		t.Fatalf("after a restart the next receipt is #%d, chained to %x; want #3 after #2", r3.Seq, r3.Prev[:4])
	}
	earned, err := rs.Issued(runner.id, time.Time{})
	if err != nil || len(earned) != 1 || earned[0].Accepted.Seq != 1 || earned[0].Newest.Seq != 2 {
		t.Fatalf("earned %+v, %v", earned, err)
	}
}
