package market

import (
	"time"

	"github.com/gpumesh/gpumesh/internal/wireschema"
)

// ReferenceCost exposes the dynamic-programming reference solver to the
// external tests (the harness lives in markettest, which imports market).
func ReferenceCost(lots []Lot, need Need, f Filter, duration, unknownMTBF time.Duration, unknownCU float64) (float64, bool) {
	rp := refParams{filter: f, duration: duration, unknownMTBF: unknownMTBF, unknownCU: unknownCU}
	return dpOptimum(lots, need, &rp)
}

// WireSchema describes the JSON form of every market message: one line per
// field, "type.path kind", sorted. A field added, removed, renamed or
// retyped changes it.
func WireSchema() string {
	schemas := [][]string{wireschema.Of("(message)", wireMessage{})}
	for typ, mk := range payloads {
		schemas = append(schemas, wireschema.Of(typ, mk()))
	}
	return wireschema.Text(schemas...)
}

// RoundsHeld counts the rounds the jobs coordinated by n still reach: the
// current one of each job and those its placements point at.
func (n *Node) RoundsHeld() int {
	seen := map[*round]bool{}
	for _, j := range n.coord.jobs {
		if j.round != nil {
			seen[j.round] = true
		}
		for _, p := range j.placements {
			if p.round != nil {
				seen[p.round] = true
			}
		}
	}
	return len(seen)
}
