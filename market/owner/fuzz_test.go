package owner

import (
	"testing"
	"time"
)

// FuzzParseKey: any input either parses to a key whose file parses back to
// the same key, or is refused; it never panics.
func FuzzParseKey(f *testing.F) {
	k, _ := KeyFromSeed(make([]byte, 32))
	good, _ := k.MarshalText()
	f.Add(good)
	f.Add([]byte("-----BEGIN GPUMESH OWNER KEY-----\n\n-----END GPUMESH OWNER KEY-----\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		k, err := ParseKey(data)
		if err != nil {
			return
		}
		again, err := k.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		k2, err := ParseKey(again)
		if err != nil || k2.ID() != k.ID() {
			t.Fatalf("round trip: %v, %v", k2.ID(), err)
		}
	})
}

// FuzzParseProof: a header either parses to a proof whose header value is
// the same text, or is refused; verifying never panics.
func FuzzParseProof(f *testing.F) {
	k, _ := KeyFromSeed(make([]byte, 32))
	p := SignRequest(k, "GET", "/v1/jobs", nil, time.Unix(1000, 0))
	f.Add(p.HeaderValue(), "GET", "/v1/jobs")
	f.Add("o1.1.x", "GET", "/")
	f.Add("", "", "")
	f.Fuzz(func(t *testing.T, header, method, target string) {
		p, err := ParseProof(header, method, target, nil)
		if err != nil {
			return
		}
		q, err := ParseProof(p.HeaderValue(), method, target, nil)
		if err != nil || q.Owner != p.Owner || q.Time != p.Time || string(q.Sig) != string(p.Sig) {
			t.Fatalf("%q parsed, but its own header value %q gives %+v, %v", header, p.HeaderValue(), q, err)
		}
		if p.Verify(time.Unix(1000, 0), RequestWindow) == nil && (p.Owner != k.ID() || method != "GET" || target != "/v1/jobs") {
			t.Fatalf("a proof of another request verified: %+v", p)
		}
		_ = p.Path()
	})
}

// FuzzParseID: an accepted ID names a key whose ID is the same text.
func FuzzParseID(f *testing.F) {
	k, _ := KeyFromSeed(make([]byte, 32))
	f.Add(string(k.ID()))
	f.Add("o1")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseID(s)
		if err != nil {
			return
		}
		pub, err := id.PublicKey()
		if err != nil || IDOf(pub) != id {
			t.Fatalf("%q accepted but names %v (%v)", s, pub, err)
		}
	})
}
