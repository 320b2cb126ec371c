package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/gossip"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/probe"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"
)

// The verification probe on the wire (node/probe). As a coordinator: the
// market asks for a supplier's probe with a ProbeRequest, which never goes
// out as a market message: this node makes a challenge (a fresh nonce, the
// work per model sized from the catalog), calls the supplier with it, times
// the answer, judges it (sampled blocks recomputed here), and steps the
// verdict into the market as a ProbeResult. As a supplier: a challenge is
// run on its free cards of the models asked, one probe at a time, through
// Config.ProbeBackend. Every call runs on a goroutine of its own, counted
// in n.wg; only the ProbeResult goes through the driver.

// probeState is the node's probe subsystem.
type probeState struct {
	cfg     probe.Config
	backend probe.Backend
	running atomic.Bool // a probe of this node's cards runs
	counts  *prometheus.CounterVec
}

// verifyMode is the mode this node coordinates under (Config.Verify, or
// its default).
func (n *Node) verifyMode() market.VerifyMode {
	switch {
	case n.cfg.Verify != "":
		return n.cfg.Verify
	case len(n.cfg.Mesh.Secret) > 0:
		return market.VerifyNever
	}
	return market.VerifyNew
}

func (n *Node) startProbes() *probeState {
	ps := &probeState{cfg: n.cfg.Probe.WithDefaults(), backend: n.cfg.ProbeBackend,
		counts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpumesh_probes_total",
			Help: "Verification probes: sent as coordinator by verdict (passed, performs_like, refused, failed, malformed), answered as supplier (answered, busy, malformed).",
		}, []string{"role", "result"})}
	if ps.backend == nil {
		ps.backend = probe.NewCUDA()
	}
	for _, r := range []string{"passed", "performs_like", "refused", "failed", "malformed"} {
		ps.counts.WithLabelValues("coordinator", r)
	}
	for _, r := range []string{"answered", "busy", "malformed"} {
		ps.counts.WithLabelValues("supplier", r)
	}
	if n.obs != nil && n.obs.m != nil {
		_ = n.obs.m.Registerer().Register(ps.counts)
	}
	return ps
}

// probesOut takes the market's probe requests out of msgs and starts
// them. Driver only.
func (n *Node) probesOut(msgs []market.Message) []market.Message {
	if !slices.ContainsFunc(msgs, func(m market.Message) bool { _, ok := m.Payload.(*market.ProbeRequest); return ok }) {
		return msgs
	}
	out := make([]market.Message, 0, len(msgs))
	for _, m := range msgs {
		req, ok := m.Payload.(*market.ProbeRequest)
		if !ok {
			out = append(out, m)
			continue
		}
		n.startProbe(m.To, req.Models)
	}
	return out
}

// startProbe challenges node's cards of models. Driver only (it reads the
// book for the cards' memory).
func (n *Node) startProbe(node string, models []string) {
	ps := n.trust.probes
	to, err := peer.Decode(node)
	if ps == nil || err != nil {
		return
	}
	mem := map[string]uint64{}
	for _, o := range n.book.Node(node) {
		if slices.Contains(models, o.Model) && !o.Simulated {
			mem[o.Model] = o.MemoryMiB
		}
	}
	if len(mem) == 0 {
		return // nothing of it left in the book: asked again if it comes back
	}
	ch, unprobed, err := ps.cfg.NewChallenge(mem)
	if err != nil {
		n.log.Warn("cannot make a probe challenge", "err", err)
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		res := n.runProbe(to, ch, unprobed)
		n.postWait(func() { n.step(res) })
	}()
}

// runProbe calls the supplier with the challenge and judges the answer.
func (n *Node) runProbe(to peer.ID, ch probe.Challenge, unprobed []string) market.ProbeResult {
	ps := n.trust.probes
	res := market.ProbeResult{Node: to.String()}
	for _, m := range unprobed {
		res.Verdicts = append(res.Verdicts, market.ProbeVerdict{Model: m, Detail: "no bandwidth figure to probe against: judged by its hardware evidence alone"})
	}
	data, err := json.Marshal(ch)
	if err != nil {
		res.Failed = err.Error()
		return res
	}
	ctx, cancel := context.WithTimeout(n.ctx, ps.cfg.Deadline)
	defer cancel()
	var raw []byte
	start := time.Now()
	err = n.direct.Call(ctx, to, probe.KindChallenge, data, func(m gossip.Message) error {
		if m.Kind != probe.KindAnswer {
			return fmt.Errorf("a %q frame in a probe answer", m.Kind)
		}
		raw = m.Data
		return nil
	})
	elapsed := time.Since(start)
	res.Now = time.Now()
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		res.Failed = fmt.Sprintf("no answer within the %s deadline", ps.cfg.Deadline)
		ps.counts.WithLabelValues("coordinator", "failed").Inc()
		return res
	case err != nil:
		res.Failed = "the probe call failed: " + err.Error()
		ps.counts.WithLabelValues("coordinator", "failed").Inc()
		return res
	}
	a, err := probe.DecodeAnswer(raw, ch)
	if err != nil {
		res.Failed = err.Error()
		ps.counts.WithLabelValues("coordinator", "malformed").Inc()
		n.log.Info("probe answer refused", "from", to, "err", err)
		return res
	}
	var rtt time.Duration
	if m, ok := n.mesh.Member(to); ok {
		rtt = m.RTT
	}
	for _, v := range ps.cfg.Judge(ch, a, elapsed, rtt) {
		switch {
		case v.Refused:
			ps.counts.WithLabelValues("coordinator", "refused").Inc()
		case v.PerformsAs != "":
			ps.counts.WithLabelValues("coordinator", "performs_like").Inc()
		default:
			ps.counts.WithLabelValues("coordinator", "passed").Inc()
		}
		res.Verdicts = append(res.Verdicts, v)
	}
	n.log.Info("probe judged", "supplier", to, "elapsed", elapsed.Round(time.Millisecond), "backend", a.Backend, "verdicts", fmt.Sprint(res.Verdicts))
	return res
}

// serveProbe runs a challenge on this node's free cards of the models
// asked and answers it; one probe at a time (another is answered with
// every card busy).
func (n *Node) serveProbe(ctx context.Context, req gossip.Message, reply func(string, []byte) error) error {
	ps := n.trust.probes
	if ps == nil {
		return errors.New("this node runs no probes")
	}
	ch, err := probe.DecodeChallenge(req.Data)
	if err != nil {
		ps.counts.WithLabelValues("supplier", "malformed").Inc()
		return err
	}
	ans := probe.Answer{Nonce: ch.Nonce, Backend: ps.backend.Name()}
	if !ps.running.CompareAndSwap(false, true) {
		ps.counts.WithLabelValues("supplier", "busy").Inc()
		ans.Cards = []probe.CardAnswer{}
	} else {
		defer ps.running.Store(false)
		cards := n.probeCards(ctx, ch)
		ans.Cards = ps.backend.Run(ctx, ch, cards)
		ps.counts.WithLabelValues("supplier", "answered").Inc()
	}
	data, err := json.Marshal(ans)
	if err != nil {
		return err
	}
	return reply(probe.KindAnswer, data)
}

// probeCards are this node's free, healthy cards of the challenge's
// models, at most probe.MaxCards.
func (n *Node) probeCards(ctx context.Context, ch probe.Challenge) []device.Card {
	var out []device.Card
	_ = n.do(ctx, func() {
		for _, st := range n.mk.Cards() {
			if _, ok := ch.Work[st.Card.Model]; ok && st.State == market.CardFree && len(out) < probe.MaxCards {
				out = append(out, st.Card)
			}
		}
	})
	return out
}
