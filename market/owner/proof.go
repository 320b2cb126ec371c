package owner

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Header is the HTTP header that carries an owner's signed request:
// "OWNER_ID.UNIX_SECONDS.SIGNATURE", the signature in unpadded base64url.
const Header = "Gpumesh-Owner-Auth"

// RequestWindow is how far a signed request's time may be from the
// verifier's clock, either way: a captured request can be replayed only
// this long, and clocks may differ by about as much.
const RequestWindow = 2 * time.Minute

// ErrExpired is wrapped by Proof.Verify's error for a request signed
// outside the window.
var ErrExpired = errors.New("signed request outside its time window")

// ErrBadProof is wrapped by ParseProof's error for a malformed header.
var ErrBadProof = errors.New("malformed signed request")

// maxTarget bounds the request target a proof carries.
const maxTarget = 8 << 10

// Proof is an owner's signed API request: its method, target (path and
// query, exactly as sent), the SHA-256 of its body and the time it was
// signed. A node verifies it on arrival and forwards it to the peers that
// act on it, which verify it again.
type Proof struct {
	Owner  ID     `json:"owner"`
	Time   int64  `json:"time"` // Unix seconds
	Method string `json:"method"`
	Target string `json:"target"`
	// BodySHA256 is the hex SHA-256 of the body (of no bytes for none).
	BodySHA256 string `json:"body_sha256"`
	Sig        []byte `json:"sig"`
}

// BodyHash returns the hex SHA-256 of body, as Proof.BodySHA256 holds it.
func BodyHash(body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}

func (p *Proof) message() []byte {
	return []byte(p.Method + "\n" + p.Target + "\n" + p.BodySHA256 + "\n" + strconv.FormatInt(p.Time, 10))
}

// SignRequest signs a request with key at time at (whole seconds).
func SignRequest(key Key, method, target string, body []byte, at time.Time) Proof {
	return SignRequestHash(key, method, target, BodyHash(body), at)
}

// SignRequestHash signs a request whose body has the hex SHA-256
// bodySHA256, without the body at hand.
func SignRequestHash(key Key, method, target, bodySHA256 string, at time.Time) Proof {
	p := Proof{Owner: key.ID(), Time: at.Unix(), Method: method, Target: target, BodySHA256: bodySHA256}
	p.Sig = key.Sign(PurposeRequest, p.message())
	return p
}

// HeaderValue is the value of Header for the proof.
func (p Proof) HeaderValue() string {
	return string(p.Owner) + "." + strconv.FormatInt(p.Time, 10) + "." + base64.RawURLEncoding.EncodeToString(p.Sig)
}

// ParseProof reads Header's value and completes the proof with the request
// it came with. It checks the form only; Verify checks the signature.
func ParseProof(header, method, target string, body []byte) (Proof, error) {
	return ParseProofHash(header, method, target, BodyHash(body))
}

// ParseProofHash is ParseProof for a request whose body is not at hand:
// bodySHA256 is the hex SHA-256 the body must have, which the caller
// checks as the body arrives (a content-addressed upload, whose target
// names its digest).
func ParseProofHash(header, method, target, bodySHA256 string) (Proof, error) {
	parts := strings.Split(header, ".")
	if len(parts) != 3 {
		return Proof{}, fmt.Errorf("%w: %s: want OWNER_ID.UNIX_SECONDS.SIGNATURE", ErrBadProof, Header)
	}
	id, err := ParseID(parts[0])
	if err != nil {
		return Proof{}, fmt.Errorf("%w: %s: %w", ErrBadProof, Header, err)
	}
	t, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || t < 0 {
		return Proof{}, fmt.Errorf("%w: %s: time %q: want Unix seconds", ErrBadProof, Header, parts[1])
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return Proof{}, fmt.Errorf("%w: %s: signature: want unpadded base64url", ErrBadProof, Header)
	}
	p := Proof{Owner: id, Time: t, Method: method, Target: target, BodySHA256: bodySHA256, Sig: sig}
	if err := p.checkForm(); err != nil {
		return Proof{}, err
	}
	return p, nil
}

func (p *Proof) checkForm() error {
	if p.Method == "" || len(p.Method) > 16 || strings.ContainsAny(p.Method, " \n") {
		return fmt.Errorf("%w: method %q", ErrBadProof, p.Method)
	}
	if !strings.HasPrefix(p.Target, "/") || len(p.Target) > maxTarget || strings.ContainsAny(p.Target, " \n") {
		return fmt.Errorf("%w: target must be a path of at most %d bytes", ErrBadProof, maxTarget)
	}
	if len(p.BodySHA256) != 64 {
		return fmt.Errorf("%w: body hash must be 64 hex digits", ErrBadProof)
	}
	if _, err := hex.DecodeString(p.BodySHA256); err != nil {
		return fmt.Errorf("%w: body hash must be 64 hex digits", ErrBadProof)
	}
	return nil
}

// Verify checks the proof's form, that its owner signed it, and that it was
// signed within window of now (either way). The error wraps ErrBadProof,
// ErrBadID, ErrBadSignature or ErrExpired.
func (p Proof) Verify(now time.Time, window time.Duration) error {
	if err := p.checkForm(); err != nil {
		return err
	}
	if err := Verify(p.Owner, PurposeRequest, p.message(), p.Sig); err != nil {
		return err
	}
	if d := now.Sub(time.Unix(p.Time, 0)); d > window || d < -window {
		return fmt.Errorf("%w: signed at %s, %v from this node's clock (at most %v; is a clock wrong?)",
			ErrExpired, time.Unix(p.Time, 0).UTC().Format(time.RFC3339), d.Round(time.Second), window)
	}
	return nil
}

// Path is the path of the proof's target, unescaped; "" if it does not
// parse.
func (p Proof) Path() string {
	u, err := url.ParseRequestURI(p.Target)
	if err != nil {
		return ""
	}
	return u.Path
}
