package market

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/gpumesh/gpumesh/internal/text"
	"github.com/gpumesh/gpumesh/market/owner"
)

// A job spec is signed by its owner, for one mesh: the signature covers the
// mesh's network name, the time of signing and the spec's canonical
// encoding (SpecMessage), so a spec cannot be altered, moved to another
// mesh, or told apart from its owner. Coordinators verify it before they
// accept the job, suppliers before they run it.

// SpecSignature is an owner's signature of a job spec. Its owner is the
// spec's Owner.
type SpecSignature struct {
	// SignedAt is when the owner signed (whole seconds, UTC). Coordinators
	// refuse a submission signed long ago (a replayed one).
	SignedAt time.Time `json:"signed_at"`
	// Sig is the ed25519 signature (64 bytes; base64 in JSON).
	Sig []byte `json:"sig"`
}

// SignedSpec is a job spec with its owner's signature: what the API takes
// and what travels between nodes.
type SignedSpec struct {
	Spec      JobSpec       `json:"spec"`
	Signature SpecSignature `json:"signature"`
}

// Errors of SignedSpec.Verify.
var (
	// ErrUnsigned: the spec names no owner or carries no signature.
	ErrUnsigned = errors.New("job spec is not signed by its owner")
	// ErrBadSpecSignature: the signature does not verify for the spec,
	// its owner and this mesh (the spec was altered, or signed for
	// another mesh, or by another key).
	ErrBadSpecSignature = errors.New("job spec signature does not verify")
)

// SpecMessage is what an owner signs for spec on network at signedAt: the
// network name, the Unix seconds of signedAt and the spec's JSON encoding
// (encoding/json's, which is deterministic for a JobSpec: fields in
// declaration order, map keys sorted), separated by NUL bytes.
func SpecMessage(network string, spec *JobSpec, signedAt time.Time) ([]byte, error) {
	body, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("encoding the spec: %w", err)
	}
	var b bytes.Buffer
	b.WriteString(network)
	b.WriteByte(0)
	b.WriteString(strconv.FormatInt(signedAt.Unix(), 10))
	b.WriteByte(0)
	b.Write(body)
	return b.Bytes(), nil
}

// SignSpec signs spec with key for network at time at (kept to the
// second). The spec's Owner is set to the key's owner ID; a spec naming
// another owner is refused.
func SignSpec(key owner.Key, network string, spec JobSpec, at time.Time) (SignedSpec, error) {
	if !key.Valid() {
		return SignedSpec{}, errors.New("market: signing a spec with the zero owner key")
	}
	id := string(key.ID())
	if spec.Owner != "" && spec.Owner != id {
		return SignedSpec{}, fmt.Errorf("market: the spec names owner %s, the key is %s", owner.ID(spec.Owner).Short(), owner.ID(id).Short())
	}
	spec.Owner = id
	at = time.Unix(at.Unix(), 0).UTC()
	msg, err := SpecMessage(network, &spec, at)
	if err != nil {
		return SignedSpec{}, err
	}
	return SignedSpec{Spec: spec, Signature: SpecSignature{SignedAt: at, Sig: key.Sign(owner.PurposeSpec, msg)}}, nil
}

// Signed reports whether the spec carries a signature (which Verify may
// still refuse).
func (s *SignedSpec) Signed() bool { return s.Spec.Owner != "" || len(s.Signature.Sig) > 0 }

// Verify checks that the spec's owner signed it, as it is, for network. The
// error wraps ErrUnsigned or ErrBadSpecSignature and says why.
func (s *SignedSpec) Verify(network string) error {
	switch {
	case s.Spec.Owner == "" && len(s.Signature.Sig) == 0:
		return fmt.Errorf("%w: sign it with the owner's key (gpumesh submit does)", ErrUnsigned)
	case s.Spec.Owner == "":
		return fmt.Errorf("%w: the spec names no owner", ErrUnsigned)
	case len(s.Signature.Sig) == 0:
		return fmt.Errorf("%w: owner %s, but no signature", ErrUnsigned, owner.ID(s.Spec.Owner).Short())
	case s.Signature.SignedAt.IsZero():
		return fmt.Errorf("%w: no signing time", ErrBadSpecSignature)
	}
	msg, err := SpecMessage(network, &s.Spec, s.Signature.SignedAt)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadSpecSignature, err)
	}
	if err := owner.Verify(owner.ID(s.Spec.Owner), owner.PurposeSpec, msg, s.Signature.Sig); err != nil {
		return fmt.Errorf("%w for mesh %q: %v (altered, signed for another mesh, or not by its owner)", ErrBadSpecSignature, network, err)
	}
	return nil
}

// MaxSignedSpecBytes bounds the JSON of a SignedSpec.
const MaxSignedSpecBytes = 4 << 20

// DecodeSignedSpec reads a SignedSpec's JSON, refusing unknown fields,
// trailing data and oversize input. It checks the form only: Verify checks
// the signature and Validate the spec.
func DecodeSignedSpec(data []byte) (SignedSpec, error) {
	if len(data) > MaxSignedSpecBytes {
		return SignedSpec{}, fmt.Errorf("signed spec of %s, at most %s", text.Bytes(int64(len(data))), text.Bytes(MaxSignedSpecBytes))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var s SignedSpec
	if err := dec.Decode(&s); err != nil {
		return SignedSpec{}, fmt.Errorf("signed spec: %w", err)
	}
	if dec.More() {
		return SignedSpec{}, errors.New("signed spec: trailing data after the JSON")
	}
	if n := len(s.Signature.Sig); n != 0 && n != 64 {
		return SignedSpec{}, fmt.Errorf("signed spec: signature of %d bytes, want 64", n)
	}
	return s, nil
}

// checkSigned verifies a job's signature when the node requires one, or
// when one came (a wrong signature is never kept).
func (c *coordinator) checkSigned(spec JobSpec, sig *SpecSignature) error {
	if sig == nil && !c.n.cfg.RequireSigned {
		return nil
	}
	s := SignedSpec{Spec: spec}
	if sig != nil {
		s.Signature = *sig
	}
	if err := s.Verify(c.n.cfg.Network); err != nil {
		return fmt.Errorf("job %s: %w", spec.ID, err)
	}
	return nil
}

// signed returns the job's signed spec for its awards; nil when unsigned.
func (j *job) signed() *SignedSpec {
	if j.sig == nil {
		return nil
	}
	return &SignedSpec{Spec: j.spec, Signature: *j.sig}
}

// bidRequest asks for bids in round, with the facts a supplier's Policy
// judges.
func (j *job) bidRequest(round uint64, want, min int) *BidRequest {
	return &BidRequest{Job: j.spec.ID, Term: j.term, Round: round, Filter: FilterOf(&j.spec), Want: want, Min: min,
		Owner: j.spec.Owner, Duration: j.spec.ExpectedDuration, Network: j.spec.NetworkOrDefault(), Resources: j.spec.Resources,
		MixedModels: j.spec.MixedModels, Image: len(j.spec.Images) > 0, Gang: j.spec.SpansNodes()}
}
