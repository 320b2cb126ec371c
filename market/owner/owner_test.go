package owner

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// seedKey is a key from a fixed seed, so failures reproduce.
func seedKey(t testing.TB, b byte) Key {
	t.Helper()
	k, err := KeyFromSeed(bytes.Repeat([]byte{b}, ed25519.SeedSize))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestIDRoundTripsAndNamesTheKey(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		seed := rapid.SliceOfN(rapid.Byte(), ed25519.SeedSize, ed25519.SeedSize).Draw(t, "seed")
		k, err := KeyFromSeed(seed)
		if err != nil {
			t.Fatal(err)
		}
		id := k.ID()
		if len(id) != IDLen || !strings.HasPrefix(string(id), IDPrefix) {
			t.Fatalf("ID %q: want %d characters starting %q", id, IDLen, IDPrefix)
		}
		got, err := ParseID(string(id))
		if err != nil || got != id {
			t.Fatalf("ParseID(%q) = %q, %v", id, got, err)
		}
		pub, _ := id.PublicKey()
		if !pub.Equal(k.priv.Public()) {
			t.Fatal("the ID names another public key")
		}
	})
}

func TestIDWithATypoIsRefused(t *testing.T) {
	id := string(seedKey(t, 1).ID())
	rapid.Check(t, func(t *rapid.T) {
		i := rapid.IntRange(len(IDPrefix), len(id)-1).Draw(t, "position")
		c := rapid.SampledFrom([]byte("abcdefghijklmnopqrstuvwxyz234567")).Draw(t, "char")
		if id[i] == c {
			t.Skip("same character")
		}
		typo := id[:i] + string(c) + id[i+1:]
		if _, err := ParseID(typo); !errors.Is(err, ErrBadID) {
			t.Fatalf("ParseID(%q) = %v, want ErrBadID", typo, err)
		}
	})
}

func TestParseIDSaysWhatIsWrong(t *testing.T) {
	id := string(seedKey(t, 2).ID())
	for _, c := range []struct{ in, want string }{
		{"", "empty"},
		{"x1" + id[2:], "does not start with"},
		{id[:len(id)-1], "characters, want"},
		{id + "a", "characters, want"},
		{id[:10] + "A" + id[11:], "lower-case letters"},
		{id[:10] + "1" + id[11:], "lower-case letters"},
		{" " + id[1:], "does not start with"},
	} {
		_, err := ParseID(c.in)
		if !errors.Is(err, ErrBadID) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseID(%q) = %v, want ErrBadID saying %q", c.in, err, c.want)
		}
	}
}

func TestKeyFileRoundTrips(t *testing.T) {
	k := seedKey(t, 3)
	text, err := k.MarshalText()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(text), "BEGIN GPUMESH OWNER KEY") || !strings.Contains(string(text), "Owner-Id: "+string(k.ID())) {
		t.Fatalf("key file:\n%s", text)
	}
	got, err := ParseKey(text)
	if err != nil || got.ID() != k.ID() {
		t.Fatalf("ParseKey: %v, %v", got.ID(), err)
	}
	if _, err := (Key{}).MarshalText(); !errors.Is(err, ErrBadKey) {
		t.Errorf("zero key marshalled: %v", err)
	}
	if (Key{}).ID() != "" || (Key{}).Valid() {
		t.Error("the zero Key has an ID")
	}
}

func TestParseKeyRefusesWhatIsNotAKey(t *testing.T) {
	k := seedKey(t, 4)
	good, _ := k.MarshalText()
	other, _ := seedKey(t, 5).MarshalText()
	swapped := strings.Replace(string(good), string(k.ID()), string(seedKey(t, 5).ID()), 1)
	for _, c := range []struct {
		name, in, want string
	}{
		{"empty", "", "no \"GPUMESH OWNER KEY\" PEM block"},
		{"other PEM", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", "of type \"PRIVATE KEY\""},
		{"trailing", string(good) + "junk", "data after"},
		{"two keys", string(good) + string(other), "data after"},
		{"header names another key", swapped, "header says owner"},
		{"short seed", "-----BEGIN GPUMESH OWNER KEY-----\nAAAA\n-----END GPUMESH OWNER KEY-----\n", "seed of 3 bytes"},
		{"unknown header", strings.Replace(string(good), "Owner-Id:", "Comment: x\nOwner-Id:", 1), "unknown PEM header"},
	} {
		_, err := ParseKey([]byte(c.in))
		if !errors.Is(err, ErrBadKey) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: ParseKey = %v, want ErrBadKey saying %q", c.name, err, c.want)
		}
	}
	// Trailing white space (an editor's newline) is fine.
	if _, err := ParseKey(append(good, "\n\n"...)); err != nil {
		t.Errorf("trailing newlines: %v", err)
	}
}

func TestNewKeyReadsItsRandomness(t *testing.T) {
	a, err := NewKey(bytes.NewReader(bytes.Repeat([]byte{7}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	if a.ID() != seedKey(t, 7).ID() {
		t.Error("NewKey did not use the seed it read")
	}
	if _, err := NewKey(bytes.NewReader(make([]byte, 5))); err == nil {
		t.Error("NewKey with 5 random bytes succeeded")
	}
}

func TestSignaturesDoNotCrossPurposesOrOwners(t *testing.T) {
	a, b := seedKey(t, 8), seedKey(t, 9)
	msg := []byte("hello")
	sig := a.Sign(PurposeSpec, msg)
	if err := Verify(a.ID(), PurposeSpec, msg, sig); err != nil {
		t.Fatalf("own signature: %v", err)
	}
	for name, err := range map[string]error{
		"other purpose": Verify(a.ID(), PurposeRequest, msg, sig),
		"other owner":   Verify(b.ID(), PurposeSpec, msg, sig),
		"other message": Verify(a.ID(), PurposeSpec, []byte("hellO"), sig),
		"short sig":     Verify(a.ID(), PurposeSpec, msg, sig[:10]),
	} {
		if !errors.Is(err, ErrBadSignature) {
			t.Errorf("%s: %v, want ErrBadSignature", name, err)
		}
	}
	if err := Verify("o1nope", PurposeSpec, msg, sig); !errors.Is(err, ErrBadID) {
		t.Errorf("bad ID: %v", err)
	}
}

func TestProofVerifiesOnlyTheRequestSigned(t *testing.T) {
	k := seedKey(t, 10)
	now := time.Unix(1_750_000_000, 0)
	body := []byte(`{"cards":4}`)
	p := SignRequest(k, "POST", "/v1/jobs/j1/scale", body, now)
	got, err := ParseProof(p.HeaderValue(), "POST", "/v1/jobs/j1/scale", body)
	if err != nil {
		t.Fatal(err)
	}
	if err := got.Verify(now.Add(30*time.Second), RequestWindow); err != nil {
		t.Fatalf("fresh proof: %v", err)
	}
	if got.Path() != "/v1/jobs/j1/scale" || got.Owner != k.ID() {
		t.Errorf("path %q owner %q", got.Path(), got.Owner)
	}
	for _, c := range []struct {
		name, method, target string
		body                 []byte
	}{
		{"other method", "DELETE", "/v1/jobs/j1/scale", body},
		{"other path", "POST", "/v1/jobs/j2/scale", body},
		{"other query", "POST", "/v1/jobs/j1/scale?x=1", body},
		{"other body", "POST", "/v1/jobs/j1/scale", []byte(`{"cards":8}`)},
	} {
		q, err := ParseProof(p.HeaderValue(), c.method, c.target, c.body)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if err := q.Verify(now, RequestWindow); !errors.Is(err, ErrBadSignature) {
			t.Errorf("%s: %v, want ErrBadSignature", c.name, err)
		}
	}
	for _, at := range []time.Time{now.Add(RequestWindow + time.Second), now.Add(-RequestWindow - time.Second)} {
		if err := got.Verify(at, RequestWindow); !errors.Is(err, ErrExpired) {
			t.Errorf("verified at %v: %v, want ErrExpired", at.Sub(now), err)
		}
	}
}

func TestParseProofSaysWhatIsWrong(t *testing.T) {
	k := seedKey(t, 11)
	p := SignRequest(k, "GET", "/v1/jobs", nil, time.Unix(100, 0))
	parts := strings.Split(p.HeaderValue(), ".")
	for _, c := range []struct{ name, header, want string }{
		{"empty", "", "want OWNER_ID"},
		{"two parts", parts[0] + "." + parts[1], "want OWNER_ID"},
		{"bad id", "o1abc." + parts[1] + "." + parts[2], "not an owner ID"},
		{"bad time", parts[0] + ".soon." + parts[2], "want Unix seconds"},
		{"negative time", parts[0] + ".-5." + parts[2], "want Unix seconds"},
		{"bad sig", parts[0] + "." + parts[1] + ".+/==", "base64url"},
	} {
		_, err := ParseProof(c.header, "GET", "/v1/jobs", nil)
		if !errors.Is(err, ErrBadProof) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrBadProof saying %q", c.name, err, c.want)
		}
	}
	if _, err := ParseProof(p.HeaderValue(), "GET", "no-slash", nil); !errors.Is(err, ErrBadProof) {
		t.Errorf("target without a slash: %v", err)
	}
}

// The last character holds 3 bits of the key and 2 spare ones: a spelling
// that differs only in the spare bits decodes to the same key, and must be
// refused, or one key would have several IDs.
func TestOnlyTheCanonicalSpellingOfAnIDIsAccepted(t *testing.T) {
	const alphabet = "abcdefghijklmnopqrstuvwxyz234567"
	id := string(seedKey(t, 12).ID())
	last := strings.IndexByte(alphabet, id[len(id)-1])
	for i := range len(alphabet) {
		if i == last || i>>2 != last>>2 {
			continue
		}
		other := id[:len(id)-1] + alphabet[i:i+1]
		if _, err := ParseID(other); !errors.Is(err, ErrBadID) || !strings.Contains(err.Error(), "canonical") {
			t.Errorf("ParseID(%q), a non-canonical spelling of %q: %v", other, id, err)
		}
	}
}
