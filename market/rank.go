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
//	MTBF  = min(advertised, observed)       observed only once a loss was seen here
//	p     = exp(-duration / MTBF)          survival over the job's duration
//	score = price / (p × computeUnits)      CNY per surviving CU-hour
//
// A lower score is better. Unknown figures take the coordinator's
// assumptions (Config.UnknownMTBF, Config.UnknownComputeUnits).
//
// The observed MTBF comes from this coordinator's track record of the
// supplier (track.go): (run time + UnknownMTBF) / losses, both halved every
// Config.TrackHalfLife (24h). It can only lower the advertised figure, and
// a supplier with no loss seen here is taken at its word. With the
// defaults (1h jobs, UnknownMTBF 6h): a supplier advertising 720h that
// lost one share after 10 minutes' run is taken as 6h10m (p 0.85 instead
// of 0.9986: it must ask 15% less to tie with a clean one); after 3 losses
// in 30 minutes' run, 2h10m (p 0.63: 37% less). A single loss stops
// mattering against a 720h claim after about 7 half-lives (a week), sooner
// if the supplier runs cleanly meanwhile.
type scorer struct {
	duration    time.Duration
	unknownMTBF time.Duration
	unknownCU   float64
	track       *trackBook // nil: advertised figures only
}

// mtbf is the MTBF clearing assumes for node, which advertised a.
func (s *scorer) mtbf(node string, a Availability) time.Duration {
	mtbf := a.MTBF.Std()
	if mtbf <= 0 {
		mtbf = s.unknownMTBF
	}
	if obs, _, ok := s.track.observed(node); ok && (mtbf <= 0 || obs < mtbf) {
		mtbf = obs
	}
	return mtbf
}

// survival is node's probability of staying up for the job's duration.
func (s *scorer) survival(node string, a Availability) float64 {
	mtbf := s.mtbf(node, a)
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
