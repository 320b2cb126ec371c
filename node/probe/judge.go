package probe

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/market"
)

// Config is the coordinator's side of the probe. The zero value is
// usable: every field has the default its comment states.
type Config struct {
	// Target is how long the work should take a card as fast as its
	// catalog bandwidth. Default 1 s.
	Target time.Duration
	// Deadline is how long the coordinator waits for the answer; a later
	// one is refused. Default 10 s (cards are probed side by side).
	Deadline time.Duration
	// Setup is the supplier's time to set a probe up (load the CUDA
	// module, allocate the buffers), taken off the time the answer took
	// before the bandwidth is bounded. Default 1 s; negative: none.
	Setup time.Duration
	// Words is each card's buffer (64-bit words, a power of two; halved
	// for cards with little memory). Default 1<<24 (128 MiB).
	Words uint64
	// Blocks is the digests each card answers with. Default 4096.
	Blocks int
	// Checks is how many blocks of each card the coordinator recomputes.
	// Default 2.
	Checks int
	// Catalog gives the models' bandwidths. Default device.DefaultCatalog().
	Catalog *device.Catalog
	// Bandwidth, when set, replaces the catalog's figure of a model, in
	// GB/s (tests scale the work down with it).
	Bandwidth func(model string) float64
	// Rand makes nonces and picks blocks. Default crypto/rand.
	Rand io.Reader
}

// Thresholds of the verdict.
const (
	// PassFraction: a card measured at no less than this fraction of its
	// model's bandwidth passes (the time includes the supplier's setup
	// beyond Setup, and the network).
	PassFraction = 0.5
	// likeSlack: a slower card performs like the fastest model of its
	// vendor whose bandwidth is at most this much above the measurement.
	likeSlack = 1.25
)

func (c Config) withDefaults() Config {
	if c.Target <= 0 {
		c.Target = time.Second
	}
	if c.Deadline <= 0 {
		c.Deadline = 10 * time.Second
	}
	if c.Setup == 0 {
		c.Setup = time.Second
	}
	if c.Words == 0 {
		c.Words = 1 << 24
	}
	if c.Blocks == 0 {
		c.Blocks = 4096
	}
	if c.Checks <= 0 {
		c.Checks = 2
	}
	if c.Catalog == nil {
		c.Catalog = device.DefaultCatalog()
	}
	if c.Rand == nil {
		c.Rand = rand.Reader
	}
	return c
}

// WithDefaults returns c with its defaults filled in.
func (c Config) WithDefaults() Config { return c.withDefaults() }

// bandwidth is model's bandwidth in GB/s, 0 when unknown.
func (c Config) bandwidth(model string) float64 {
	if c.Bandwidth != nil {
		return c.Bandwidth(model)
	}
	if m, ok := c.Catalog.Lookup(model); ok {
		return m.BandwidthGBs
	}
	return 0
}

// NewChallenge makes a challenge for models (key → the smallest memory of
// the model's cards, MiB). Models without a bandwidth figure are left out:
// they are judged by their evidence alone (Unprobed).
func (c Config) NewChallenge(models map[string]uint64) (Challenge, []string, error) {
	c = c.withDefaults()
	ch := Challenge{Blocks: c.Blocks, Work: map[string]Work{}}
	if _, err := io.ReadFull(c.Rand, ch.Nonce[:]); err != nil {
		return Challenge{}, nil, fmt.Errorf("probe: nonce: %w", err)
	}
	var unprobed []string
	for m, mem := range models {
		gbs := c.bandwidth(m)
		if gbs <= 0 {
			unprobed = append(unprobed, m)
			continue
		}
		w := Size(gbs, c.Target, c.Words, mem)
		if w.Words < uint64(2*c.Blocks) {
			w.Words = uint64(2 * c.Blocks)
		}
		ch.Work[m] = w
	}
	slices.Sort(unprobed)
	return ch, unprobed, nil
}

// Judge decides, per model, what an answer shows: elapsed is the time from
// sending the challenge to the answer, rtt the link's round trip. A model
// none of whose cards was probed gets no verdict (it is asked again later).
// It recomputes Checks blocks of every card (its cost is Checks/Blocks of
// one card's work each).
func (c Config) Judge(ch Challenge, a Answer, elapsed, rtt time.Duration) []market.ProbeVerdict {
	c = c.withDefaults()
	if elapsed > c.Deadline {
		var out []market.ProbeVerdict
		for m := range ch.Work {
			out = append(out, market.ProbeVerdict{Model: m, Refused: true,
				Detail: fmt.Sprintf("the answer came %s after the challenge, past the %s deadline", elapsed.Round(10*time.Millisecond), c.Deadline)})
		}
		sortVerdicts(out)
		return out
	}
	busy := max(elapsed-rtt-max(c.Setup, 0), time.Millisecond)
	var out []market.ProbeVerdict
	for model, w := range ch.Work {
		cards, unprobed := 0, 0
		var wrong, why string
		for _, ca := range a.Cards {
			if ca.Model == model && ca.Unprobed {
				unprobed++
				why = ca.Err
			}
			if ca.Model != model || ca.Err != "" {
				continue
			}
			cards++
			seed := Seed(ch.Nonce, ca.Index)
			for range c.Checks {
				b := c.pick(ch.Blocks)
				if Block(seed, w, ch.Blocks, b) != ca.Digests[b] && wrong == "" {
					wrong = fmt.Sprintf("card %s: block %d's digest is wrong (an answer not computed from the challenge)", ca.Card, b)
				}
			}
		}
		if cards == 0 && unprobed > 0 {
			v := market.ProbeVerdict{Model: model, Cards: unprobed}
			if m, ok := c.Catalog.Lookup(model); ok && m.Vendor == device.VendorNVIDIA {
				v.Refused, v.Detail = true, "its cards were not probed: "+why
			} else {
				v.Detail = "no probe for its vendor: judged by its hardware evidence alone"
			}
			out = append(out, v)
			continue
		}
		if cards == 0 {
			continue
		}
		v := market.ProbeVerdict{Model: model, Cards: cards}
		gbs := c.bandwidth(model)
		measured := w.Bytes() / busy.Seconds() / 1e9
		switch {
		case wrong != "":
			v.Refused, v.Detail = true, wrong
		case measured >= PassFraction*gbs:
			v.Detail = fmt.Sprintf("measured at least %.0f GB/s, %.0f catalogued", measured, gbs)
		default:
			like, ok := c.performsLike(model, measured)
			if !ok {
				v.Refused = true
				v.Detail = fmt.Sprintf("measured at least %.0f GB/s of %.0f catalogued: slower than any model of its vendor", measured, gbs)
				break
			}
			v.PerformsAs, v.ComputeUnits = like.Key, like.ComputeUnits
			v.Detail = fmt.Sprintf("measured at least %.0f GB/s of %.0f catalogued, as a %s (%.0f GB/s)", measured, gbs, like.Key, c.bandwidth(like.Key))
		}
		out = append(out, v)
	}
	sortVerdicts(out)
	return out
}

// performsLike is the fastest model of model's vendor whose bandwidth is at
// most likeSlack times measured.
func (c Config) performsLike(model string, measured float64) (device.Model, bool) {
	claimed, ok := c.Catalog.Lookup(model)
	if !ok {
		return device.Model{}, false
	}
	var best device.Model
	found := false
	for _, m := range c.Catalog.Models() {
		gbs := c.bandwidth(m.Key)
		if m.Vendor != claimed.Vendor || m.Key == model || gbs <= 0 || gbs > measured*likeSlack {
			continue
		}
		if !found || gbs > c.bandwidth(best.Key) {
			best, found = m, true
		}
	}
	return best, found
}

// pick draws a block at random.
func (c Config) pick(blocks int) int {
	var b [8]byte
	if _, err := io.ReadFull(c.Rand, b[:]); err != nil {
		return 0
	}
	return int(binary.LittleEndian.Uint64(b[:]) % uint64(blocks))
}

func sortVerdicts(vs []market.ProbeVerdict) {
	slices.SortFunc(vs, func(a, b market.ProbeVerdict) int {
		if a.Model < b.Model {
			return -1
		}
		if a.Model > b.Model {
			return 1
		}
		return 0
	})
}
