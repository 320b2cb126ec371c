package gossip

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// The golden files under testdata/wire/vN/ are the envelopes of wire
// version N as that version's builds wrote them: an ad and a payload
// message, each from the peer and at the time goldenAuthor and goldenNow
// give. Every later build must read every version it claims to read, and
// the current version must still write them byte for byte: a change that
// an older peer could not read fails here. After a deliberate change of
// the wire version, write the new version's files with
//
//	go test ./gossip/ -run TestWireGolden -update
var updateGolden = flag.Bool("update", false, "write the golden files of the current wire version")

// goldenAuthor is the fixed peer the golden envelopes come from.
func goldenAuthor(t *testing.T) peer.ID {
	t.Helper()
	seed := bytes.Repeat([]byte{7}, ed25519.SeedSize)
	_, pub, err := crypto.GenerateEd25519Key(bytes.NewReader(seed))
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

var goldenNow = time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)

func goldenMessage(id peer.ID) Message {
	return Message{Sender: id, Seq: 42, IssuedAt: goldenNow, ExpiresAt: goldenNow.Add(time.Minute),
		Nonce: bytes.Repeat([]byte{0xab}, NonceSize), Kind: "market",
		Data: []byte(`{"from":"a","to":"b","type":"release","payload":{"job":"j1","lease":"L1"}}`)}
}

func TestWireGolden(t *testing.T) {
	id := goldenAuthor(t)
	cur := filepath.Join("testdata", "wire", fmt.Sprintf("v%d", Version))
	if *updateGolden {
		ad, err := EncodeAd(testAd(id, 7, goldenNow))
		if err != nil {
			t.Fatal(err)
		}
		msg, err := EncodeMessage(goldenMessage(id))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(cur, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, b := range map[string][]byte{"ad.pb": ad, "message.pb": msg} {
			if err := os.WriteFile(filepath.Join(cur, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	read := 0
	for v := uint32(1); v <= Version; v++ {
		dir := filepath.Join("testdata", "wire", fmt.Sprintf("v%d", v))
		adBytes, err := os.ReadFile(filepath.Join(dir, "ad.pb"))
		if err != nil {
			t.Fatalf("wire version %d has no golden ad: %v", v, err)
		}
		ad, err := DecodeAd(adBytes, id, goldenNow.Add(time.Second))
		if err != nil {
			t.Errorf("this build cannot read a version %d ad: %v", v, err)
		} else if want := testAd(id, 7, goldenNow); fmt.Sprint(ad) != fmt.Sprint(want) {
			t.Errorf("a version %d ad reads as %+v, was written as %+v", v, ad, want)
		}
		msgBytes, err := os.ReadFile(filepath.Join(dir, "message.pb"))
		if err != nil {
			t.Fatalf("wire version %d has no golden message: %v", v, err)
		}
		m, err := DecodeMessage(msgBytes, id, goldenNow.Add(time.Second), MaxDirectSize)
		if err != nil {
			t.Errorf("this build cannot read a version %d message: %v", v, err)
		} else if want := goldenMessage(id); m.Kind != want.Kind || !bytes.Equal(m.Data, want.Data) || m.Seq != want.Seq {
			t.Errorf("a version %d message reads as %+v", v, m)
		}
		read++
		if v != Version {
			continue
		}
		// The current version writes what it wrote.
		if b, err := EncodeAd(testAd(id, 7, goldenNow)); err != nil || !bytes.Equal(b, adBytes) {
			t.Errorf("the ad's wire form changed (%v): older peers may not read it; raise gossip.Version and write testdata/wire/v%d (-update)", err, Version+1)
		}
		if b, err := EncodeMessage(goldenMessage(id)); err != nil || !bytes.Equal(b, msgBytes) {
			t.Errorf("the message envelope's wire form changed (%v): raise gossip.Version and write testdata/wire/v%d (-update)", err, Version+1)
		}
	}
	if read != int(Version) {
		t.Errorf("read %d versions, want %d", read, Version)
	}
}

// An envelope of a newer version is refused naming its version, and its
// sender is recorded for the node's status; an older or equal one is not.
func TestNewerVersionIsRecorded(t *testing.T) {
	id := goldenAuthor(t)
	m := goldenMessage(id)
	b, err := EncodeMessage(m)
	if err != nil {
		t.Fatal(err)
	}
	// Version is field 1 (varint) of the envelope, first on the wire.
	if b[0] != 0x08 || b[1] != byte(Version) {
		t.Fatalf("the envelope does not start with its version: % x", b[:2])
	}
	b[1] = byte(Version + 1)
	_, err = DecodeMessage(b, id, goldenNow.Add(time.Second), MaxDirectSize)
	var me *MessageError
	if !errors.As(err, &me) || me.Reason != ReasonVersion || me.Version != Version+1 {
		t.Fatalf("a version %d envelope: %v", Version+1, err)
	}
	vs := NewVersions()
	noteVersion(vs, id, err, goldenNow)
	noteVersion(vs, id, ErrStale, goldenNow)
	vs.Note(id, "market", 1, 1, goldenNow) // not newer
	got := vs.Newer(goldenNow.Add(-time.Minute))
	if len(got) != 1 || got[0].Peer != id || got[0].Protocol != "gossip" || got[0].Version != Version+1 || got[0].Reads != Version {
		t.Errorf("recorded %+v", got)
	}
	if late := vs.Newer(goldenNow.Add(time.Minute)); len(late) != 0 {
		t.Errorf("a peer last heard before the window is still listed: %+v", late)
	}
	var none *Versions
	none.Note(id, "gossip", 9, 1, goldenNow) // a nil record records nothing
	if none.Newer(time.Time{}) != nil {
		t.Error("a nil record listed peers")
	}
}
