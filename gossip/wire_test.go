package gossip

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/gossip/gossippb"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

func TestEncodeDecodeRoundTrip(t *testing.T) {
	p := newPeerID(t)
	now := time.Now()
	ad := testAd(p, 42, now)
	b := mustEncode(t, ad)
	got, err := DecodeAd(b, p, now)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, ad) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, ad)
	}
	if len(b) > 300 {
		t.Errorf("a two-model ad encodes to %d bytes; want it small", len(b))
	}
}

func TestLargestAdFitsTheEnvelope(t *testing.T) {
	p := newPeerID(t)
	now := time.Now()
	ad := testAd(p, 1, now)
	ad.Region = strings.Repeat("r", MaxLabelLen)
	ad.Cards = nil
	for i := range MaxCardGroups {
		ad.Cards = append(ad.Cards, CardGroup{
			Model:  strings.Repeat("m", MaxLabelLen-2) + string(rune('a'+i/26)) + string(rune('a'+i%26)),
			Vendor: "v", MemoryMiB: MaxMemoryMiB, ComputeUnits: MaxComputeUnits,
			Free: MaxCardsPerAd / MaxCardGroups, PriceCNY: MaxPriceCNY,
		})
	}
	b := mustEncode(t, ad)
	if len(b) > MaxEnvelopeSize/4 {
		t.Errorf("largest ad is %d bytes: want well under MaxEnvelopeSize %d", len(b), MaxEnvelopeSize)
	}
	if _, err := DecodeAd(b, p, now); err != nil {
		t.Fatal(err)
	}
}

// DecodeAd names the reason for each way an ad can be wrong. (The network
// test TestValidatorRefusesBadMessages sends the same through gossipsub.)
func TestDecodeAdReasons(t *testing.T) {
	p, other := newPeerID(t), newPeerID(t)
	now := time.Now()
	good := testAd(p, 1, now)
	cases := []struct {
		name string
		data []byte
		want *MessageError
	}{
		{"empty", nil, ErrVersion},
		{"garbage", []byte{0xff, 0xff, 0xff}, ErrMalformed},
		{"truncated", mustEncode(t, good)[:40], ErrMalformed},
		{"oversized", make([]byte, MaxEnvelopeSize+1), ErrOversized},
		{"version 2", env(good, func(e *gossippb.Envelope) { e.Version = 2 }), ErrVersion},
		{"bad sender", env(good, func(e *gossippb.Envelope) { e.Sender = []byte{1, 2, 3} }), ErrBadSender},
		{"forged sender", env(good, func(e *gossippb.Envelope) { e.Sender = []byte(other) }), ErrForgedSender},
		{"no body", env(good, func(e *gossippb.Envelope) { e.Body = nil }), ErrUnexpectedBody},
		{"short nonce", env(good, func(e *gossippb.Envelope) { e.Nonce = e.Nonce[:8] }), ErrBadField},
		{"negative issue time", env(good, func(e *gossippb.Envelope) { e.IssuedAtMs = -5 }), ErrBadField},
		{"65 groups", env(good, func(e *gossippb.Envelope) {
			c := capacity(e)
			for len(c.Cards) <= MaxCardGroups {
				c.Cards = append(c.Cards, c.Cards[0])
			}
		}), ErrBadField},
		{"unsorted groups", env(good, func(e *gossippb.Envelope) {
			c := capacity(e)
			c.Cards[0], c.Cards[1] = c.Cards[1], c.Cards[0]
		}), ErrBadField},
		{"upper-case model", env(good, func(e *gossippb.Envelope) { capacity(e).Cards[0].Model = "H100" }), ErrBadField},
		{"empty group", env(good, func(e *gossippb.Envelope) {
			g := capacity(e).Cards[0]
			g.Free, g.Reserved, g.Busy = 0, 0, 0
		}), ErrBadField},
		{"4 billion sessions", env(good, func(e *gossippb.Envelope) { capacity(e).Availability.Sessions = math.MaxUint32 }), ErrBadField},
		{"huge memory", env(good, func(e *gossippb.Envelope) { capacity(e).Cards[0].MemoryMib = math.MaxUint64 }), ErrBadField},
		{"price over the limit", env(good, func(e *gossippb.Envelope) { capacity(e).Cards[0].PriceCnyPerHour = MaxPriceCNY + 1 }), ErrBadField},
		// proto3 strings must be UTF-8: the protobuf decoder refuses the rest.
		{"invalid UTF-8 region", bytes.Replace(env(good, func(e *gossippb.Envelope) { capacity(e).Region = "QQ" }), []byte("QQ"), []byte{0xff, 0xfe}, 1), ErrMalformed},
		{"expired", env(testAd(p, 1, now.Add(-time.Hour)), nil), ErrExpired},
		{"from the future", env(testAd(p, 1, now.Add(2*MaxClockSkew)), nil), ErrFuture},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeAd(c.data, p, now)
			if !errors.Is(err, c.want) {
				t.Fatalf("err %v, want %v", err, c.want)
			}
			if ReasonOf(err) != c.want.Reason {
				t.Fatalf("reason %v, want %v", ReasonOf(err), c.want.Reason)
			}
		})
	}
}

func TestEncodeAdRefusesWhatPeersReject(t *testing.T) {
	p := newPeerID(t)
	now := time.Now()
	for name, mut := range map[string]func(*Ad){
		"no author":       func(a *Ad) { a.Peer = "" },
		"NaN price":       func(a *Ad) { a.Cards[0].PriceCNY = math.NaN() },
		"negative count":  func(a *Ad) { a.Cards[0].Busy = -1 },
		"ttl over MaxTTL": func(a *Ad) { a.ExpiresAt = a.IssuedAt.Add(MaxTTL + time.Millisecond) },
		"unsorted":        func(a *Ad) { a.Cards[0], a.Cards[1] = a.Cards[1], a.Cards[0] },
		"negative uptime": func(a *Ad) { a.Availability.Uptime = -time.Second },
	} {
		ad := testAd(p, 1, now)
		mut(&ad)
		if _, err := EncodeAd(ad); !errors.Is(err, ErrBadField) && !errors.Is(err, ErrBadSender) {
			t.Errorf("%s: EncodeAd err %v, want a bad field or sender", name, err)
		}
	}
}

func TestCheckTime(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		issued, expires time.Duration
		want            error
	}{
		{0, time.Second, nil},
		{-time.Minute, -time.Millisecond, ErrExpired},
		{-time.Minute, 0, ErrExpired}, // void at the instant of expiry
		{MaxClockSkew, MaxClockSkew + time.Second, nil},
		{MaxClockSkew + time.Millisecond, MaxClockSkew + time.Second, ErrFuture},
	} {
		err := CheckTime(now.Add(c.issued), now.Add(c.expires), now)
		if (c.want == nil) != (err == nil) || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("issued %s, expires %s: err %v, want %v", c.issued, c.expires, err, c.want)
		}
	}
}

func TestReasonVerdicts(t *testing.T) {
	for r := ReasonNone; r < numReasons; r++ {
		if r.String() == "" || strings.HasPrefix(r.String(), "reason(") {
			t.Errorf("reason %d has no name", r)
		}
	}
	ignore := map[Reason]bool{ReasonExpired: true, ReasonFuture: true, ReasonStale: true, ReasonDuplicate: true, ReasonThrottled: true}
	for r := ReasonNone + 1; r < numReasons; r++ {
		want := Reject
		if ignore[r] {
			want = Ignore
		}
		if r.Verdict() != want {
			t.Errorf("%v: verdict %v, want %v", r, r.Verdict(), want)
		}
	}
	if ReasonOf(errors.New("x")) != ReasonMalformed || ReasonOf(nil) != ReasonNone {
		t.Error("ReasonOf of plain errors")
	}
	wrapped := errors.Join(errors.New("context"), msgErr(ReasonStale, "seq 3"))
	if !errors.Is(wrapped, ErrStale) || errors.Is(wrapped, ErrDuplicate) || ReasonOf(wrapped) != ReasonStale {
		t.Error("a wrapped MessageError keeps its reason")
	}
}

func TestEnvelopeSchemaIsStable(t *testing.T) {
	// Field numbers are the wire contract: pin the ones in use.
	fields := (&gossippb.Envelope{}).ProtoReflect().Descriptor().Fields()
	for name, num := range map[string]int32{
		"version": 1, "sender": 2, "seq": 3, "issued_at_ms": 4, "expires_at_ms": 5, "nonce": 6, "capacity_ad": 16,
	} {
		f := fields.ByName(protoreflect.Name(name))
		if f == nil || int32(f.Number()) != num {
			t.Errorf("Envelope.%s: want field number %d", name, num)
		}
	}
	b, _ := proto.Marshal(&gossippb.Envelope{Version: 1})
	if len(b) != 2 || b[0] != 0x08 || b[1] != 0x01 {
		t.Errorf("version 1 encodes as % x", b)
	}
}
