package market

import (
	"math"
	"time"
)

// minSurvival keeps scores finite for a job far longer than a supplier's
// MTBF: such a supplier ranks a million times worse than a sure one, not
// infinitely worse.
const minSurvival = 1e-6

// scorer turns a price into an effective price per compute unit: the
// ranker of the placement pipeline.
//
//	p     = exp(-duration / MTBF)          survival over the job's duration
//	score = price / (p × computeUnits)      CNY per surviving CU-hour
//
// A lower score is better. Unknown figures take the coordinator's
// assumptions (Config.UnknownMTBF, Config.UnknownComputeUnits).
type scorer struct {
	duration    time.Duration
	unknownMTBF time.Duration
	unknownCU   float64
}

func (s *scorer) survival(a Availability) float64 {
	mtbf := a.MTBF.Std()
	if mtbf <= 0 {
		mtbf = s.unknownMTBF
	}
	if mtbf <= 0 {
		return 1
	}
	return max(math.Exp(-float64(s.duration)/float64(mtbf)), minSurvival)
}

func (s *scorer) cu(cu float64) float64 {
	if cu > 0 {
		return cu
	}
	return s.unknownCU
}

// score is the effective price of one card of compute cu at price, on a
// supplier whose survival is p.
func (s *scorer) score(price, p, cu float64) float64 {
	return price / (p * s.cu(cu))
}

// pay converts the uniform clearing price priceCU (CNY per surviving CU-hour)
// back to one card's price per card-hour: priceCU × p × cu, never below what
// the card asked and never above the job's max price.
func (s *scorer) pay(priceCU, p, cu, asked, maxPrice float64) float64 {
	v := priceCU * p * s.cu(cu)
	if v < asked {
		v = asked
	}
	if v > maxPrice {
		v = maxPrice
	}
	return v
}
