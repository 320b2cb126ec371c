package market

import "time"

// ReferenceCost exposes the dynamic-programming reference solver to the
// external tests (the harness lives in markettest, which imports market).
func ReferenceCost(lots []Lot, need Need, f Filter, duration, unknownMTBF time.Duration, unknownCU float64) (float64, bool) {
	rp := refParams{filter: f, duration: duration, unknownMTBF: unknownMTBF, unknownCU: unknownCU}
	return dpOptimum(lots, need, &rp)
}
