package gossip

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/gossip/gossippb"
	pubsubpb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// The fuzz targets decode at this fixed time (Unix ms); the seed ads in
// testdata/fuzz were issued just before it.
const fuzzNowMs = 1_780_000_000_000

// fuzzSender is the author of the seed ads: an identity-multihash peer ID
// (the form ed25519 keys take) built from fixed bytes.
func fuzzSender() peer.ID {
	id, err := peer.IDFromBytes(append([]byte{0x00, 0x24, 0x08, 0x01, 0x12, 0x20}, bytes.Repeat([]byte{0x42}, 32)...))
	if err != nil {
		panic(err)
	}
	return id
}

// Run: go test -run '^$' -fuzz FuzzDecodeAd ./gossip/
//
// Whatever DecodeAd accepts re-encodes (EncodeAd accepts it) and decodes to
// the same ad; whatever it refuses comes with a reason; nothing panics.
func FuzzDecodeAd(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		now := time.UnixMilli(fuzzNowMs)
		signer := fuzzSender()
		if e, err := DecodeEnvelope(data); err == nil {
			signer = peer.ID(e.GetSender())
		}
		ad, err := DecodeAd(data, signer, now)
		if err != nil {
			var me *MessageError
			if !errors.As(err, &me) || me.Reason == ReasonNone {
				t.Fatalf("refusal without a reason: %v", err)
			}
			return
		}
		if len(data) > MaxEnvelopeSize {
			t.Fatalf("accepted %d bytes", len(data))
		}
		b, err := EncodeAd(ad)
		if err != nil {
			t.Fatalf("accepted ad does not re-encode: %v\n%+v", err, ad)
		}
		again, err := DecodeAd(b, signer, now)
		if err != nil {
			t.Fatalf("re-encoded ad refused: %v", err)
		}
		if !reflect.DeepEqual(again, ad) {
			t.Fatalf("round trip changed the ad:\n got %+v\nwant %+v", again, ad)
		}
	})
}

// Run: go test -run '^$' -fuzz FuzzDecodeEnvelope ./gossip/
//
// DecodeEnvelope never panics and never lets through an envelope of another
// version, without a valid sender or with a nonce of the wrong size.
func FuzzDecodeEnvelope(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := DecodeEnvelope(data)
		if err != nil {
			if ReasonOf(err) == ReasonNone {
				t.Fatalf("refusal without a reason: %v", err)
			}
			return
		}
		if n := len(e.GetNonce()); e.GetVersion() != Version || (n != 0 && n != NonceSize) || len(data) > MaxEnvelopeSize {
			t.Fatalf("accepted %+v (%d bytes)", e, len(data))
		}
		if _, err := peer.IDFromBytes(e.GetSender()); err != nil {
			t.Fatalf("accepted sender %x: %v", e.GetSender(), err)
		}
	})
}

// Run: go test -run '^$' -fuzz FuzzDecodeSynced ./gossip/
//
// A book-sync message is taken only if it is a pubsub message on the
// capacity topic whose signature verifies and whose ad decodes; whatever is
// taken re-encodes; nothing panics.
func FuzzDecodeSynced(f *testing.F) {
	for _, s := range syncSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ad, err := decodeSynced(data, fuzzTopic, time.UnixMilli(fuzzNowMs))
		if err != nil {
			if ReasonOf(err) == ReasonNone {
				t.Fatalf("refusal without a reason: %v", err)
			}
			return
		}
		m := new(pubsubpb.Message)
		if proto.Unmarshal(data, m) != nil || verifySignature(m) != nil || peer.ID(m.GetFrom()) != ad.Peer {
			t.Fatal("took a message that is not signed by the ad's author")
		}
		if _, err := EncodeAd(ad); err != nil {
			t.Fatalf("taken ad does not re-encode: %v", err)
		}
	})
}

const fuzzTopic = "gpumesh/fuzz/v1/capacity"

// syncSeeds are book-sync messages: good ones signed by a fixed key, and
// one of each way to spoil them.
func syncSeeds(tb testing.TB) [][]byte {
	key, err := crypto.UnmarshalEd25519PrivateKey(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{9}, ed25519.SeedSize)))
	if err != nil {
		tb.Fatal(err)
	}
	author, _ := peer.IDFromPrivateKey(key)
	other, _, _ := crypto.GenerateEd25519Key(nil)
	now := time.UnixMilli(fuzzNowMs).Add(-time.Second)
	ad := testAd(author, 3, now)
	data, err := EncodeAd(ad)
	if err != nil {
		tb.Fatal(err)
	}
	enc := func(m *pubsubpb.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			tb.Fatal(err)
		}
		return b
	}
	good := pubsubMessage(tb, fuzzTopic, author, 1, data, key)
	altered := pubsubMessage(tb, fuzzTopic, author, 2, data, key)
	altered.Data = append([]byte(nil), data...)
	altered.Data[len(altered.Data)-1] ^= 1
	withKey := pubsubMessage(tb, fuzzTopic, author, 3, data, key)
	withKey.Key, _ = crypto.MarshalPublicKey(key.GetPublic())
	return [][]byte{
		enc(good),
		enc(withKey),
		enc(altered),
		enc(pubsubMessage(tb, fuzzTopic, author, 4, data, nil)),
		enc(pubsubMessage(tb, fuzzTopic, author, 5, data, other)),
		enc(pubsubMessage(tb, "gpumesh/other/v1/capacity", author, 6, data, key)),
		nil,
		[]byte("garbage"),
	}
}

// fuzzSeeds are the inputs the corpus starts from: a good ad, the largest
// ad, and one of each kind of bad envelope.
func fuzzSeeds() [][]byte {
	p := fuzzSender()
	now := time.UnixMilli(fuzzNowMs).Add(-time.Second)
	good := Ad{
		Peer: p, Seq: 7, IssuedAt: now, ExpiresAt: now.Add(30 * time.Second), Region: "cn-east",
		Cards: []CardGroup{
			{Model: "h100-sxm-80g", Vendor: device.VendorNVIDIA, MemoryMiB: 81559, ComputeUnits: 3.17, Free: 6, Busy: 2, PriceCNY: 17.5},
			{Model: "x-tesla-t4-15g", Vendor: device.VendorNVIDIA, MemoryMiB: 15360, Reserved: 1, PriceCNY: 1.88},
		},
		Availability: Availability{Uptime: time.Hour, MTBF: 72 * time.Hour, Sessions: 4},
	}
	enc := func(ad Ad, mut func(*gossippb.Envelope)) []byte { return env(ad, mut) }
	big := good
	big.Cards = nil
	for i := range MaxCardGroups {
		big.Cards = append(big.Cards, CardGroup{Model: fmt.Sprintf("m%02d", i), Vendor: "v", MemoryMiB: 1, Free: 1, PriceCNY: 1})
	}
	withEvidence := good
	withEvidence.Cards = slices.Clone(good.Cards)
	withEvidence.Cards[0].Evidence = []CardEvidence{
		{UUID: "GPU-1", Evidence: device.Evidence{Serial: "1654922000001", BoardPartNumber: "692-2G520-0200-000", PCIDeviceID: 0x233010de, DriverVersion: "550.54.15", MaxSMClockMHz: 1980}, MemoryMiB: 81559},
		{UUID: "GPU-2", MemoryMiB: 81559},
	}
	simulated := good
	simulated.Cards = slices.Clone(good.Cards)
	simulated.Cards[1].Simulated = true
	return [][]byte{
		enc(good, nil),
		enc(big, nil),
		enc(withEvidence, nil),
		enc(simulated, nil),
		nil,
		[]byte("garbage"),
		enc(good, nil)[:40],
		enc(good, func(e *gossippb.Envelope) { e.Version = 2 }),
		enc(good, func(e *gossippb.Envelope) { e.Sender = []byte("mallory") }),
		enc(good, func(e *gossippb.Envelope) { e.Body = nil }),
		enc(good, func(e *gossippb.Envelope) { e.Nonce = nil }),
		enc(good, func(e *gossippb.Envelope) { e.Nonce = e.Nonce[:3] }),
		enc(good, func(e *gossippb.Envelope) { capacity(e).Cards[0].Free = 1_000_000 }),
		enc(good, func(e *gossippb.Envelope) { capacity(e).Cards[0].PriceCnyPerHour = math.NaN() }),
		enc(good, func(e *gossippb.Envelope) { capacity(e).Cards[1].Model = "h100-sxm-80g" }),
		enc(good, func(e *gossippb.Envelope) { e.ExpiresAtMs = e.IssuedAtMs + int64(3*MaxTTL/time.Millisecond) }),
		enc(good, func(e *gossippb.Envelope) { e.ExpiresAtMs = fuzzNowMs - 1 }),
		enc(good, func(e *gossippb.Envelope) { e.Seq = 0 }),
	}
}

// TestWriteFuzzSeeds writes fuzzSeeds into testdata/fuzz, the corpus `go
// test` replays on every run. It runs only when GPUMESH_WRITE_FUZZ_SEEDS=1
// (after a change to the schema or the seeds).
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("GPUMESH_WRITE_FUZZ_SEEDS") != "1" {
		t.Skip("set GPUMESH_WRITE_FUZZ_SEEDS=1 to rewrite testdata/fuzz")
	}
	for target, seeds := range map[string][][]byte{
		"FuzzDecodeAd": fuzzSeeds(), "FuzzDecodeEnvelope": fuzzSeeds(), "FuzzDecodeSynced": syncSeeds(t),
	} {
		dir := filepath.Join("testdata", "fuzz", target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i, s := range seeds {
			body := "go test fuzz v1\n[]byte(" + strconv.Quote(string(s)) + ")\n"
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
