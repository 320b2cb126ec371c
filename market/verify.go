package market

import (
	"fmt"
	"slices"
	"time"

	"github.com/gpumesh/gpumesh/internal/text"
)

// Verification: a coordinator may require a supplier to pass a timed
// probe of its cards before it asks the supplier to bid (Config.Verify).
// The market decides whom to probe and what the verdict does; node runs
// the challenge itself (node/probe: a fresh nonce, a memory-bound kernel on
// each claimed card, an answer checked by sampling, the time it took) and
// hands the verdict back as a ProbeResult. A card that performs far below
// its model is treated as the model it performs like (its compute units
// and model key in the job's checks and in scoring), or, slower than any
// model of its vendor, refused. Verdicts are kept in the coordinator's
// track record of the supplier (TrackRecord.Probe), so they survive a
// restart; like the rest of the track record they are this coordinator's
// own and never shared.

// VerifyMode says when a coordinator requires a supplier's probe.
type VerifyMode string

// The verification modes.
const (
	// VerifyNever asks no supplier to prove its cards (the default of the
	// market; node's default is VerifyNew on a mesh without a secret).
	VerifyNever VerifyMode = "never"
	// VerifyNew asks each supplier once, before its first award from this
	// coordinator; a failed probe is asked again after ProbeRetryFailed.
	VerifyNew VerifyMode = "new"
	// VerifyAlways asks again whenever the last verdict is older than
	// VerifyAlwaysFor: in practice before every award.
	VerifyAlways VerifyMode = "always"
)

// ParseVerifyMode reads a mode as the command line gives it.
func ParseVerifyMode(s string) (VerifyMode, error) {
	switch m := VerifyMode(s); m {
	case VerifyNever, VerifyNew, VerifyAlways:
		return m, nil
	}
	return "", fmt.Errorf("verify mode %q: want new, always or never", s)
}

const (
	// ProbeRetry is how long a coordinator waits for a probe's verdict
	// before it asks again.
	ProbeRetry = 30 * time.Second
	// ProbeRetryFailed is how long a failed or refused verdict stands.
	ProbeRetryFailed = time.Hour
	// VerifyAlwaysFor is how long a verdict stands in VerifyAlways.
	VerifyAlwaysFor = time.Minute
	// maxProbeModels bounds the models of one ProbeRequest or result.
	maxProbeModels = 64
)

// ProbeVerdict is what a probe showed of one model's cards on a supplier.
type ProbeVerdict struct {
	Model string `json:"model"`
	// Cards is how many of the model's cards were probed.
	Cards int `json:"cards"`
	// PerformsAs, when set, is the catalog model the cards perform like,
	// far below Model: they are treated as it. ComputeUnits are its.
	PerformsAs   string  `json:"performs_as,omitempty"`
	ComputeUnits float64 `json:"compute_units,omitempty"`
	// Refused says the cards are slower than any model of their vendor,
	// or answered wrong: they are not asked to bid.
	Refused bool `json:"refused,omitempty"`
	// Detail is the measurement, for people ("measured ≥ 3120 GB/s of
	// 3350").
	Detail string `json:"detail,omitempty"`
}

// ProbeRecord is a coordinator's latest verification of a supplier.
type ProbeRecord struct {
	// At is when the verdict came; Failed, when set, says why the probe as
	// a whole failed (a forged, late or malformed answer, no answer).
	At       time.Time      `json:"at"`
	Failed   string         `json:"failed,omitempty"`
	Verdicts []ProbeVerdict `json:"verdicts,omitempty"`
}

func (p *ProbeRecord) validate() error {
	if p.At.IsZero() || len(p.Failed) > maxTextLen || len(p.Verdicts) > maxProbeModels {
		return fmt.Errorf("probe record: no time, or too long")
	}
	for _, v := range p.Verdicts {
		if v.Model == "" || v.Cards < 0 || !(v.ComputeUnits >= 0 && v.ComputeUnits < 1000) || len(v.Detail) > maxTextLen {
			return fmt.Errorf("probe record: bad verdict for %q", v.Model)
		}
	}
	return nil
}

// ProbeRequest asks a supplier to prove its cards of Models; node runs the
// challenge (node/probe) and never hands it to the supplier's market. Job
// is the job whose placement wanted it.
type ProbeRequest struct {
	Job    string   `json:"job"`
	Models []string `json:"models"`
}

// JobID implements Payload.
func (m *ProbeRequest) JobID() string { return m.Job }

// Type implements Payload.
func (*ProbeRequest) Type() string { return "probe_request" }

func (m *ProbeRequest) validate() error {
	if len(m.Models) == 0 || len(m.Models) > maxProbeModels {
		return badf("models: 1 to %d", maxProbeModels)
	}
	for _, s := range m.Models {
		if s == "" || len(s) > maxTextLen {
			return badf("model %q", s)
		}
	}
	return nil
}

// ProbeResult hands a coordinator node's verdict on a supplier's probe: per
// model, or Failed for the whole probe.
type ProbeResult struct {
	Now      time.Time
	Node     string
	Failed   string
	Verdicts []ProbeVerdict
}

func (e ProbeResult) at() time.Time { return e.Now }

// onProbeResult records a verdict in the supplier's track record.
func (c *coordinator) onProbeResult(ev ProbeResult) error {
	if err := checkID("probe result node", ev.Node); err != nil {
		return fmt.Errorf("%w: %v", ErrBadEvent, err)
	}
	rec := &ProbeRecord{At: c.n.now, Failed: oneLineCut(ev.Failed, maxTextLen), Verdicts: slices.Clone(ev.Verdicts)}
	if err := rec.validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrBadEvent, err)
	}
	e := c.track.entry(ev.Node)
	if e == nil {
		return nil // track records are off: nothing to keep it in
	}
	e.Probe = rec
	delete(c.probeAsked, ev.Node)
	c.track.touch(e)
	return nil
}

// probeOf is the verdict this coordinator holds of node, or nil.
func (c *coordinator) probeOf(node string) *ProbeRecord {
	if e := c.track.recs[node]; e != nil {
		return e.Probe
	}
	return nil
}

// fresh reports whether p stands now under the verification mode.
func (c *coordinator) fresh(p *ProbeRecord) bool {
	switch {
	case p == nil:
		return false
	case c.n.cfg.Verify == VerifyAlways:
		return c.n.now.Sub(p.At) < VerifyAlwaysFor
	case p.Failed != "" || slices.ContainsFunc(p.Verdicts, func(v ProbeVerdict) bool { return v.Refused }):
		return c.n.now.Sub(p.At) < ProbeRetryFailed
	}
	return true
}

// askProbe asks node to prove its cards of model, unless it was asked
// within ProbeRetry; it returns when it was asked.
func (c *coordinator) askProbe(j *job, node, model string) time.Time {
	at, asked := c.probeAsked[node]
	if asked && c.n.now.Sub(at) < ProbeRetry {
		return at
	}
	models := []string{model}
	if nv, ok := c.n.cfg.Book.(nodeView); ok {
		models = models[:0]
		for _, o := range nv.Node(node) {
			models = append(models, o.Model)
		}
		if len(models) == 0 {
			models = []string{model}
		}
	}
	c.probeAsked[node] = c.n.now
	c.n.send(node, &ProbeRequest{Job: j.spec.ID, Models: models})
	return c.n.now
}

// verifyHold says why o's node may not bid for j yet under the
// verification policy — not verified (it is asked to be), or its cards of
// o's model refused — or reasonPassed; performs is set when its cards are
// treated as another model.
func (c *coordinator) verifyHold(j *job, o *Offer) (Reason, string, *ProbeVerdict) {
	if c.n.cfg.Verify == VerifyNever || c.n.cfg.Verify == "" || o.Node == c.n.cfg.ID || o.Simulated {
		// This node's own cards; simulated cards, which only jobs that
		// allow them get, and which no probe could pass.
		return reasonPassed, "", nil
	}
	p := c.probeOf(o.Node)
	var v *ProbeVerdict
	if c.fresh(p) && p.Failed == "" {
		for i := range p.Verdicts {
			if p.Verdicts[i].Model == o.Model {
				v = &p.Verdicts[i]
			}
		}
	}
	switch {
	case c.fresh(p) && p.Failed != "":
		return ReasonProbe, "verification probe failed: " + p.Failed, nil
	case v == nil:
		at := c.askProbe(j, o.Node, o.Model)
		return ReasonUnverified, fmt.Sprintf("waiting for its %s cards' verification probe (asked %s ago)", o.Model, shortDuration(c.n.now.Sub(at))), nil
	case v.Refused:
		return ReasonProbe, "verification probe: " + v.Detail, nil
	case v.PerformsAs != "":
		return reasonPassed, "", v
	}
	return reasonPassed, "", nil
}

// performsHold checks the facts of cards that perform as v.PerformsAs
// against the job: a reason when the job does not take that model.
func (c *coordinator) performsHold(j *job, f cardFacts, v *ProbeVerdict) (Reason, string) {
	f.model, f.cu = v.PerformsAs, v.ComputeUnits
	if r := j.match.check(&f); r != reasonPassed {
		return ReasonProbe, fmt.Sprintf("verification probe: its %s cards perform like %s (%s); %s", v.Model, v.PerformsAs, v.Detail, j.match.detail(r, &f))
	}
	return reasonPassed, ""
}

// probeAdjust treats a bid's cards as what the node's probe showed them
// to be (their compute units), and says why the node may not win: not
// verified, refused, or performing like a model the job does not take.
func (c *coordinator) probeAdjust(j *job, node string, cards []BidCard) (Reason, string) {
	if c.n.cfg.Verify == VerifyNever || c.n.cfg.Verify == "" || node == c.n.cfg.ID {
		return reasonPassed, ""
	}
	for i := range cards {
		bc := &cards[i]
		r, detail, v := c.verifyHold(j, &Offer{Node: node, Model: bc.Model, Vendor: bc.Vendor, MemoryMiB: bc.MemoryMiB, ComputeUnits: bc.ComputeUnits, Simulated: bc.Simulated})
		if r != reasonPassed {
			return r, detail
		}
		if v != nil {
			f := cardFacts{model: bc.Model, vendor: bc.Vendor, memMiB: bc.MemoryMiB, cu: bc.ComputeUnits, price: bc.PriceCNY, preempts: bc.Preempts, simulated: bc.Simulated}
			if r, detail := c.performsHold(j, f, v); r != reasonPassed {
				return r, detail
			}
			bc.ComputeUnits = v.ComputeUnits
		}
	}
	return reasonPassed, ""
}

// verifyNodeHold is verifyHold for a node whose bid came by the broadcast
// topic: the node's own verdict as a whole.
func (c *coordinator) verifyNodeHold(node string) (Reason, string) {
	if c.n.cfg.Verify == VerifyNever || c.n.cfg.Verify == "" || node == c.n.cfg.ID {
		return reasonPassed, ""
	}
	if p := c.probeOf(node); c.fresh(p) && p.Failed != "" {
		return ReasonProbe, "verification probe failed: " + p.Failed
	}
	return reasonPassed, "" // per model: probeAdjust
}

// probeText says a verdict in a few words, for track notes.
func probeText(p *ProbeRecord) string {
	if p == nil {
		return ""
	}
	if p.Failed != "" {
		return "probe failed: " + p.Failed
	}
	n := 0
	for _, v := range p.Verdicts {
		n += v.Cards
	}
	return fmt.Sprintf("probe passed for %s", text.Count(n, "card"))
}
