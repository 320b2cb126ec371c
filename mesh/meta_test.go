package mesh

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	ma "github.com/multiformats/go-multiaddr"
	"google.golang.org/protobuf/encoding/protowire"
)

func TestMetaRoundTrip(t *testing.T) {
	in := Meta{
		Addrs:     []ma.Multiaddr{ma.StringCast("/ip4/8.8.8.8/tcp/4747"), ma.StringCast("/ip4/192.168.1.5/udp/4747/quic-v1")},
		Region:    "cn-east",
		Cards:     8,
		FreeCards: 3,
		Models:    []string{"h100-sxm-80g", "rtx4090-48g"},
	}
	b, err := encodeMeta(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := decodeMeta(b)
	if err != nil {
		t.Fatal(err)
	}
	if out.Region != in.Region || out.Cards != in.Cards || out.FreeCards != in.FreeCards || !reflect.DeepEqual(out.Models, in.Models) || out.Leaving {
		t.Fatalf("round trip: %+v, want %+v", out, in)
	}
	if len(out.Addrs) != 2 || !out.Addrs[0].Equal(in.Addrs[0]) || !out.Addrs[1].Equal(in.Addrs[1]) {
		t.Fatalf("addresses: %v", out.Addrs)
	}
	in.Leaving = true
	b, _ = encodeMeta(in)
	if out, _ := decodeMeta(b); !out.Leaving || out.Coordinator {
		t.Fatal("leaving flag lost")
	}
	in.Leaving, in.Coordinator = false, true
	b, _ = encodeMeta(in)
	if out, _ := decodeMeta(b); out.Leaving || !out.Coordinator {
		t.Fatalf("coordinator flag lost: %+v", out)
	}
	if _, err := decodeMeta(append(b, 7<<3, 2)); err == nil {
		t.Fatal("a coordinator flag of 2 was accepted")
	}
	in.Coordinator, in.Standby = false, true
	b, _ = encodeMeta(in)
	if out, _ := decodeMeta(b); out.Coordinator || !out.Standby {
		t.Fatalf("standby flag lost: %+v", out)
	}
	if _, err := decodeMeta(append(b, 8<<3, 2)); err == nil {
		t.Fatal("a standby flag of 2 was accepted")
	}
}

func TestEncodeMetaKeepsWithinLimitPreferringPublicAddresses(t *testing.T) {
	var addrs []ma.Multiaddr
	// Relayed addresses are long; add many, then a loopback, a private
	// and a public one at the end.
	relay := "/ip4/1.2.3.4/tcp/4747/p2p/12D3KooWJWoaqZhDaoEFshF7Rh1bpY9ohihFhzcW6d69Lr2NASuq/p2p-circuit"
	for i := 0; i < 12; i++ {
		addrs = append(addrs, ma.StringCast(relay))
	}
	addrs = append(addrs, ma.StringCast("/ip4/127.0.0.1/tcp/1"), ma.StringCast("/ip4/10.0.0.2/tcp/2"), ma.StringCast("/ip4/5.6.7.8/tcp/3"))
	b, err := encodeMeta(Meta{Addrs: addrs, Region: "r", Models: []string{"m"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > MaxMetaSize {
		t.Fatalf("encoded %d bytes, limit %d", len(b), MaxMetaSize)
	}
	out, err := decodeMeta(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Addrs) < 3 || out.Addrs[0].String() != "/ip4/5.6.7.8/tcp/3" || out.Addrs[1].String() != "/ip4/10.0.0.2/tcp/2" {
		t.Fatalf("addresses kept: %v", out.Addrs)
	}
	if len(out.Addrs) == len(addrs) {
		t.Fatal("expected some relayed addresses dropped to fit")
	}
}

func TestEncodeMetaRejectsBadFields(t *testing.T) {
	long := strings.Repeat("x", MaxModelLen)
	var many []string
	for i := 0; i < MaxModels; i++ {
		many = append(many, long[:MaxModelLen-2]+string(rune('a'+i))+"z")
	}
	for name, m := range map[string]Meta{
		"free above cards": {Cards: 1, FreeCards: 2},
		"negative cards":   {Cards: -1},
		"too many cards":   {Cards: MaxCards + 1},
		"long region":      {Region: strings.Repeat("r", MaxRegionLen+1)},
		"bad utf8 region":  {Region: "\xff"},
		"empty model":      {Models: []string{""}},
		"long model":       {Models: []string{long + "x"}},
		"too many models":  {Models: append(many, "one-more")},
	} {
		if _, err := encodeMeta(m); !errors.Is(err, ErrBadMeta) {
			t.Errorf("%s: err = %v, want ErrBadMeta", name, err)
		}
	}
	// Valid fields that together exceed the limit.
	_, err := encodeMeta(Meta{Region: strings.Repeat("r", MaxRegionLen), Models: many})
	if !errors.Is(err, ErrMetaTooLarge) {
		t.Errorf("oversized meta: err = %v, want ErrMetaTooLarge", err)
	}
}

func TestDecodeMetaRejectsMalformedInput(t *testing.T) {
	tag := func(num protowire.Number, typ protowire.Type) []byte { return protowire.AppendTag(nil, num, typ) }
	for name, b := range map[string][]byte{
		"truncated tag":      {0x80},
		"region as varint":   append(tag(2, protowire.VarintType), 1),
		"bad multiaddr":      protowire.AppendBytes(tag(1, protowire.BytesType), []byte{0xff, 0xff, 0xff}),
		"cards overflow":     protowire.AppendVarint(tag(3, protowire.VarintType), MaxCards+1),
		"free above cards":   protowire.AppendVarint(tag(4, protowire.VarintType), 2),
		"leaving 7":          protowire.AppendVarint(tag(6, protowire.VarintType), 7),
		"too large":          bytes.Repeat([]byte{0}, MaxMetaSize+1),
		"truncated length":   append(tag(2, protowire.BytesType), 10, 'a'),
		"bad unknown field":  tag(99, protowire.BytesType),
		"invalid wire type":  {0x0f},
		"bad utf8 in region": protowire.AppendString(tag(2, protowire.BytesType), "\xff"),
	} {
		if _, err := decodeMeta(b); !errors.Is(err, ErrBadMeta) {
			t.Errorf("%s: err = %v, want ErrBadMeta", name, err)
		}
	}
	// Unknown fields from a later version are skipped.
	b := protowire.AppendString(tag(42, protowire.BytesType), "future")
	b = append(b, protowire.AppendString(tag(2, protowire.BytesType), "eu")...)
	m, err := decodeMeta(b)
	if err != nil || m.Region != "eu" {
		t.Fatalf("unknown field: %+v, %v", m, err)
	}
}

// FuzzDecodeMeta: metadata comes from peers. Decoding must never panic, and
// whatever decodes must satisfy the limits and re-encode within MaxMetaSize
// to the same fields.
func FuzzDecodeMeta(f *testing.F) {
	seed, _ := encodeMeta(Meta{Addrs: []ma.Multiaddr{ma.StringCast("/ip4/1.2.3.4/tcp/1")}, Region: "x", Cards: 2, FreeCards: 1, Models: []string{"a100-sxm-80g"}, Leaving: true})
	f.Add(seed)
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMeta(b)
		if err != nil {
			if !errors.Is(err, ErrBadMeta) {
				t.Fatalf("error not ErrBadMeta: %v", err)
			}
			return
		}
		if err := m.validate(); err != nil {
			t.Fatalf("decoded meta fails validation: %v", err)
		}
		again, err := encodeMeta(m)
		if err != nil {
			t.Fatalf("decoded meta does not re-encode: %v", err)
		}
		m2, err := decodeMeta(again)
		if err != nil {
			t.Fatalf("re-encoded meta does not decode: %v", err)
		}
		if m2.Region != m.Region || m2.Cards != m.Cards || m2.FreeCards != m.FreeCards || m2.Leaving != m.Leaving || !reflect.DeepEqual(m2.Models, m.Models) {
			t.Fatalf("re-encoding changed fields: %+v vs %+v", m2, m)
		}
	})
}
