package gossip

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/gossip/gossippb"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// Version is the wire schema's major version, carried in every envelope and
// in the "/v1/" of topic names.
const Version = 1

// Hard limits of the wire format. A message beyond any of them is rejected.
const (
	// MaxEnvelopeSize bounds one encoded envelope. An ad of MaxCardGroups
	// groups stays far below it (about 7 KiB).
	MaxEnvelopeSize = 64 << 10
	// MaxPubSubMessageSize bounds one gossipsub RPC frame
	// (pubsub.WithMaxMessageSize). Large data travels by stream, not gossip.
	MaxPubSubMessageSize = 256 << 10
	// MaxTTL bounds ExpiresAt - IssuedAt of any message.
	MaxTTL = 2 * time.Hour
	// MaxClockSkew is how far in the future an IssuedAt may lie before the
	// message is ignored as "from the future".
	MaxClockSkew = time.Minute
	// NonceSize is the length of Envelope.nonce when there is one.
	NonceSize = 16

	// MaxCardGroups bounds the models in one ad.
	MaxCardGroups = 64
	// MaxCardsPerAd bounds the cards, all states, in one ad: a rack of
	// machines behind one node, not a data center.
	MaxCardsPerAd = 1024
	// MaxMemoryMiB bounds one card's memory (16 TiB).
	MaxMemoryMiB = 16 << 20
	// MaxComputeUnits bounds one card's compute units (a B200 is about 7).
	MaxComputeUnits = 100
	// MaxPriceCNY bounds a price per card-hour.
	MaxPriceCNY = 100_000
	// MaxSessions bounds Availability.Sessions.
	MaxSessions = 1_000_000_000
	// MaxLabelLen bounds region, model and vendor strings, in bytes.
	MaxLabelLen = 64
	// maxDuration bounds uptime and MTBF: a century.
	maxDuration = 100 * 365 * 24 * time.Hour
)

// EncodeAd encodes ad into an envelope authored by ad.Peer, without a nonce:
// on a signed topic the sequence number and expiry already make a replayed
// ad harmless. The ad must pass the checks every receiver applies (CheckAd);
// EncodeAd refuses one that would be rejected.
func EncodeAd(ad Ad) ([]byte, error) {
	if err := CheckAd(ad); err != nil {
		return nil, err
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(envelopeOf(ad, nil))
	if err != nil {
		return nil, msgErr(ReasonMalformed, "encode: %v", err)
	}
	if len(b) > MaxEnvelopeSize {
		return nil, msgErr(ReasonOversized, "%d bytes, limit %d", len(b), MaxEnvelopeSize)
	}
	return b, nil
}

// envelopeOf is ad as an envelope, without any check.
func envelopeOf(ad Ad, nonce []byte) *gossippb.Envelope {
	groups := make([]*gossippb.CardGroup, len(ad.Cards))
	for i, g := range ad.Cards {
		groups[i] = &gossippb.CardGroup{
			Model:           g.Model,
			Vendor:          string(g.Vendor),
			MemoryMib:       g.MemoryMiB,
			ComputeUnits:    g.ComputeUnits,
			Free:            uint32(g.Free),
			Reserved:        uint32(g.Reserved),
			Busy:            uint32(g.Busy),
			PriceCnyPerHour: g.PriceCNY,
			Simulated:       g.Simulated,
			Evidence:        evidenceToPB(g.Evidence),
		}
	}
	return &gossippb.Envelope{
		Version:     Version,
		Sender:      []byte(ad.Peer),
		Seq:         ad.Seq,
		IssuedAtMs:  ad.IssuedAt.UnixMilli(),
		ExpiresAtMs: ad.ExpiresAt.UnixMilli(),
		Nonce:       nonce,
		Body: &gossippb.Envelope_CapacityAd{CapacityAd: &gossippb.CapacityAd{
			Region: ad.Region,
			Cards:  groups,
			Availability: &gossippb.Availability{
				UptimeS:  uint64(ad.Availability.Uptime / time.Second),
				MtbfS:    uint64(ad.Availability.MTBF / time.Second),
				Sessions: uint32(ad.Availability.Sessions),
			},
		}},
	}
}

// DecodeEnvelope parses data as an envelope of this wire version. It checks
// the size, the encoding, the version, the sender and the nonce's length
// (none, or NonceSize; the direct protocols will require one); the body
// is left to the decoder of its kind.
func DecodeEnvelope(data []byte) (*gossippb.Envelope, error) {
	return decodeEnvelope(data, MaxEnvelopeSize)
}

func decodeEnvelope(data []byte, limit int) (*gossippb.Envelope, error) {
	if len(data) > limit {
		return nil, msgErr(ReasonOversized, "%d bytes, limit %d", len(data), limit)
	}
	env := new(gossippb.Envelope)
	if err := proto.Unmarshal(data, env); err != nil {
		return nil, msgErr(ReasonMalformed, "%v", err)
	}
	if env.GetVersion() != Version {
		return nil, &MessageError{Reason: ReasonVersion, Version: env.GetVersion(),
			Detail: fmt.Sprintf("version %d, this node reads %d", env.GetVersion(), Version)}
	}
	if _, err := peer.IDFromBytes(env.GetSender()); err != nil {
		return nil, msgErr(ReasonBadSender, "%v", err)
	}
	if n := len(env.GetNonce()); n != 0 && n != NonceSize {
		return nil, msgErr(ReasonBadField, "nonce: %d bytes, want none or %d", n, NonceSize)
	}
	return env, nil
}

// DecodeAd parses a capacity ad signed by signer and checks it as every
// receiver does at time now: DecodeEnvelope's checks, sender == signer,
// CheckAd, then the expiry and issue time against now. It does not know what
// the receiver already holds: stale and duplicate sequence numbers are the
// Book's to tell.
func DecodeAd(data []byte, signer peer.ID, now time.Time) (Ad, error) {
	env, err := DecodeEnvelope(data)
	if err != nil {
		return Ad{}, err
	}
	body, ok := env.GetBody().(*gossippb.Envelope_CapacityAd)
	if !ok || body.CapacityAd == nil {
		return Ad{}, msgErr(ReasonUnexpectedBody, "want a capacity ad, got %T", env.GetBody())
	}
	sender := peer.ID(env.GetSender())
	if sender != signer {
		return Ad{}, msgErr(ReasonForgedSender, "sender %s, signed by %s", sender, signer)
	}
	ad, err := adFromPB(env, body.CapacityAd)
	if err != nil {
		return Ad{}, err
	}
	if err := CheckAd(ad); err != nil {
		return Ad{}, err
	}
	return ad, CheckTime(ad.IssuedAt, ad.ExpiresAt, now)
}

// CheckTime tells whether a message issued at issued and void at expires
// may be used at now: not expired (ErrExpired) and not issued more than
// MaxClockSkew ahead of now (ErrFuture).
func CheckTime(issued, expires, now time.Time) error {
	if !now.Before(expires) {
		return msgErr(ReasonExpired, "expired %s ago", now.Sub(expires).Round(time.Millisecond))
	}
	if issued.Sub(now) > MaxClockSkew {
		return msgErr(ReasonFuture, "issued %s ahead of our clock", issued.Sub(now).Round(time.Millisecond))
	}
	return nil
}

func adFromPB(env *gossippb.Envelope, c *gossippb.CapacityAd) (Ad, error) {
	if n := len(c.GetCards()); n > MaxCardGroups {
		return Ad{}, msgErr(ReasonBadField, "%d card groups, limit %d", n, MaxCardGroups)
	}
	av := c.GetAvailability()
	if av.GetUptimeS() > uint64(maxDuration/time.Second) || av.GetMtbfS() > uint64(maxDuration/time.Second) {
		return Ad{}, msgErr(ReasonBadField, "availability: uptime %d s, mtbf %d s: over a century", av.GetUptimeS(), av.GetMtbfS())
	}
	if av.GetSessions() > MaxSessions {
		return Ad{}, msgErr(ReasonBadField, "availability: %d sessions, limit %d", av.GetSessions(), MaxSessions)
	}
	ad := Ad{
		Peer:      peer.ID(env.GetSender()),
		Seq:       env.GetSeq(),
		IssuedAt:  time.UnixMilli(env.GetIssuedAtMs()),
		ExpiresAt: time.UnixMilli(env.GetExpiresAtMs()),
		Region:    c.GetRegion(),
		Cards:     make([]CardGroup, len(c.GetCards())),
		Availability: Availability{
			Uptime:   time.Duration(av.GetUptimeS()) * time.Second,
			MTBF:     time.Duration(av.GetMtbfS()) * time.Second,
			Sessions: int(av.GetSessions()),
		},
	}
	if env.GetIssuedAtMs() <= 0 || env.GetExpiresAtMs() <= 0 {
		return Ad{}, msgErr(ReasonBadField, "issued_at_ms %d, expires_at_ms %d: must be positive", env.GetIssuedAtMs(), env.GetExpiresAtMs())
	}
	cards := 0
	for i, g := range c.GetCards() {
		// Each count is bounded before summing so that the sum cannot wrap.
		for _, n := range []uint32{g.GetFree(), g.GetReserved(), g.GetBusy()} {
			if n > MaxCardsPerAd {
				return Ad{}, msgErr(ReasonBadField, "cards[%d] (%q): %d cards, limit %d per ad", i, g.GetModel(), n, MaxCardsPerAd)
			}
		}
		ad.Cards[i] = CardGroup{
			Model:        g.GetModel(),
			Vendor:       device.Vendor(g.GetVendor()),
			MemoryMiB:    g.GetMemoryMib(),
			ComputeUnits: g.GetComputeUnits(),
			Free:         int(g.GetFree()),
			Reserved:     int(g.GetReserved()),
			Busy:         int(g.GetBusy()),
			PriceCNY:     g.GetPriceCnyPerHour(),
			Simulated:    g.GetSimulated(),
		}
		if n := len(g.GetEvidence()); n > MaxEvidencePerAd {
			return Ad{}, msgErr(ReasonBadEvidence, "cards[%d] (%q): %d evidence entries, limit %d per ad", i, g.GetModel(), n, MaxEvidencePerAd)
		}
		ad.Cards[i].Evidence = evidenceFromPB(g.GetEvidence())
		cards += ad.Cards[i].Total()
	}
	if cards > MaxCardsPerAd {
		return Ad{}, msgErr(ReasonBadField, "%d cards, limit %d per ad", cards, MaxCardsPerAd)
	}
	return ad, nil
}

// CheckAd checks an ad's fields as every receiver does: a valid author and
// sequence number, times within MaxTTL, labels of printable text within
// MaxLabelLen, one group per model in model order, counts, memory, compute
// units and prices finite and within their limits. It does not look at the
// clock (see CheckTime).
func CheckAd(ad Ad) error {
	if _, err := peer.IDFromBytes([]byte(ad.Peer)); err != nil {
		return msgErr(ReasonBadSender, "%v", err)
	}
	return checkAdFields(ad)
}

// checkAdFields is CheckAd but for the author, which an ad being built by
// the Advertiser does not have yet.
func checkAdFields(ad Ad) error {
	if ad.Seq == 0 {
		return msgErr(ReasonBadField, "seq 0: sequence numbers start at 1")
	}
	if ad.IssuedAt.UnixMilli() <= 0 {
		return msgErr(ReasonBadField, "issued at %s: before 1970", ad.IssuedAt)
	}
	if ttl := ad.ExpiresAt.Sub(ad.IssuedAt); ttl <= 0 || ttl > MaxTTL {
		return msgErr(ReasonBadField, "expires %s after issue: want within (0, %s]", ttl, MaxTTL)
	}
	if err := checkLabel("region", ad.Region, false); err != nil {
		return err
	}
	if len(ad.Cards) > MaxCardGroups {
		return msgErr(ReasonBadField, "%d card groups, limit %d", len(ad.Cards), MaxCardGroups)
	}
	if ad.Availability.Uptime < 0 || ad.Availability.Uptime > maxDuration ||
		ad.Availability.MTBF < 0 || ad.Availability.MTBF > maxDuration {
		return msgErr(ReasonBadField, "availability: uptime %s, mtbf %s: want within [0, a century]", ad.Availability.Uptime, ad.Availability.MTBF)
	}
	if ad.Availability.Sessions < 0 || ad.Availability.Sessions > MaxSessions {
		return msgErr(ReasonBadField, "availability: %d sessions, want within [0, %d]", ad.Availability.Sessions, MaxSessions)
	}
	cards := 0
	if err := checkEvidence(ad.Cards); err != nil {
		return err
	}
	for i, g := range ad.Cards {
		if err := checkGroup(g); err != nil {
			return msgErr(ReasonBadField, "cards[%d] (%q): %s", i, g.Model, err.(*MessageError).Detail)
		}
		if i > 0 && ad.Cards[i-1].Model >= g.Model {
			return msgErr(ReasonBadField, "cards[%d]: model %q after %q: want one group per model, sorted", i, g.Model, ad.Cards[i-1].Model)
		}
		cards += g.Total()
		if cards > MaxCardsPerAd {
			return msgErr(ReasonBadField, "more than %d cards in one ad", MaxCardsPerAd)
		}
	}
	return nil
}

func checkGroup(g CardGroup) error {
	if err := checkLabel("model", g.Model, true); err != nil {
		return err
	}
	if strings.ContainsFunc(g.Model, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_')
	}) {
		return msgErr(ReasonBadField, "model key %q: want lower-case letters, digits, '-', '.', '_'", g.Model)
	}
	if err := checkLabel("vendor", string(g.Vendor), true); err != nil {
		return err
	}
	for _, n := range []int{g.Free, g.Reserved, g.Busy} {
		if n < 0 || n > MaxCardsPerAd {
			return msgErr(ReasonBadField, "counts free %d, reserved %d, busy %d: want within [0, %d]", g.Free, g.Reserved, g.Busy, MaxCardsPerAd)
		}
	}
	if g.Total() == 0 {
		return msgErr(ReasonBadField, "no cards: a group holds at least one")
	}
	if g.MemoryMiB == 0 || g.MemoryMiB > MaxMemoryMiB {
		return msgErr(ReasonBadField, "memory %d MiB: want within [1, %d]", g.MemoryMiB, MaxMemoryMiB)
	}
	if !finiteIn(g.ComputeUnits, 0, MaxComputeUnits) {
		return msgErr(ReasonBadField, "compute units %v: want within [0, %d]", g.ComputeUnits, MaxComputeUnits)
	}
	if !finiteIn(g.PriceCNY, 0, MaxPriceCNY) {
		return msgErr(ReasonBadField, "price %v CNY per card-hour: want within [0, %d]", g.PriceCNY, MaxPriceCNY)
	}
	return nil
}

func finiteIn(v, lo, hi float64) bool {
	return !math.IsNaN(v) && v >= lo && v <= hi // NaN fails every comparison; ±Inf fails the bounds
}

// checkLabel accepts valid UTF-8 without control characters, at most
// MaxLabelLen bytes, non-empty when required.
func checkLabel(field, s string, required bool) error {
	switch {
	case required && s == "":
		return msgErr(ReasonBadField, "%s: empty", field)
	case len(s) > MaxLabelLen:
		return msgErr(ReasonBadField, "%s: %d bytes, limit %d", field, len(s), MaxLabelLen)
	case !utf8.ValidString(s):
		return msgErr(ReasonBadField, "%s: not UTF-8", field)
	case strings.ContainsFunc(s, unicode.IsControl):
		return msgErr(ReasonBadField, "%s %q: control characters", field, s)
	}
	return nil
}

// sortGroups orders groups by model key, the order CheckAd wants.
func sortGroups(gs []CardGroup) {
	slices.SortFunc(gs, func(a, b CardGroup) int { return strings.Compare(a.Model, b.Model) })
}
