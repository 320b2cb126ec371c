package jobstate

import (
	"testing"

	"github.com/gpumesh/gpumesh/market"
)

// A coordinator's records of a job are ordered by term, then version.
func TestMarkOrder(t *testing.T) {
	m := func(term, version uint64) Mark { return MarkOf(market.JobRecord{Term: term, Version: version}) }
	for _, c := range []struct {
		a, b Mark
		want bool
	}{
		{m(1, 1), m(1, 1), true},
		{m(1, 2), m(1, 1), true},
		{m(1, 1), m(1, 2), false},
		{m(2, 1), m(1, 9), true},
		{m(1, 9), m(2, 1), false},
		{m(1, 1), Mark{}, true},
		{Mark{}, m(0, 1), false},
	} {
		if got := c.a.atLeast(c.b); got != c.want {
			t.Errorf("%+v.atLeast(%+v) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}
