package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Stage is a step of a job's way from its submission to its first lease
// renewal, the label of gpumesh_job_stage_seconds. Each is timed on the
// node where it happens.
type Stage string

// The stages, in the order a job goes through them. Any other value is
// counted as "other".
const (
	// StageAPI: the node that took the HTTP request, from its arrival to
	// the node handing the spec on (authentication, reading and decoding
	// the body, signing for an owner token).
	StageAPI Stage = "api"
	// StageSignature: checking the owner's signature on the spec (the
	// node that took the request, and the coordinator again).
	StageSignature Stage = "signature"
	// StageQueue: the coordinator, waiting for its driver (the goroutine
	// that owns the market) to take the submission up.
	StageQueue Stage = "queue"
	// StagePersist: the coordinator, stepping the job into its market and
	// writing its record to disk.
	StagePersist Stage = "persist"
	// StageReplicate: the coordinator, until the job's replicas confirmed
	// its record (the submission is acknowledged then).
	StageReplicate Stage = "replicate"
	// StageBidWindow: the coordinator, from the job entering its market to
	// the auction clearing (bid requests out, bids back, winners chosen).
	StageBidWindow Stage = "bid_window"
	// StageAward: the coordinator, from the auction clearing to every
	// share running (the award's commit to the replicas, its delivery, the
	// supplier's accept and start, its report back).
	StageAward Stage = "award"
	// StageStart: the supplier, starting the job's process (the executor).
	StageStart Stage = "start"
	// StageFirstRenewal: the coordinator, from the job running to the first
	// lease renewal of one of its shares.
	StageFirstRenewal Stage = "first_renewal"
)

// Stages lists every stage in order.
func Stages() []Stage {
	return []Stage{StageAPI, StageSignature, StageQueue, StagePersist, StageReplicate, StageBidWindow, StageAward, StageStart, StageFirstRenewal}
}

// stageBuckets span a fraction of a millisecond (a signature check) to
// seconds (an auction waiting for capacity is not a stage: it ends the
// timeline).
var stageBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

func newStageHistogram() *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gpumesh_job_stage_seconds",
		Help:    "Time a job spent in each stage from submission to its first lease renewal, timed on the node where the stage happens (api, signature, queue, persist, replicate, bid_window, award, start, first_renewal).",
		Buckets: stageBuckets,
	}, []string{"stage"})
}

// ObserveStage records that a job spent d in stage s.
func (m *Metrics) ObserveStage(s Stage, d time.Duration) {
	label := OtherLabel
	for _, st := range Stages() {
		if s == st {
			label = string(s)
		}
	}
	m.stages.WithLabelValues(label).Observe(max(d, 0).Seconds())
}
