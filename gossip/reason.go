package gossip

import (
	"errors"
	"fmt"
)

// Verdict is what a validator decides about a message from a peer, in
// gossipsub's terms.
type Verdict uint8

// The verdicts. Accept delivers and forwards the message. Reject drops it and
// lowers the score of the peer that sent it: the message is wrong whoever
// forwards it (malformed, forged, absurd). Ignore drops it without blame: an
// honest peer may have forwarded it while it was still good (expired since,
// or overtaken by a newer ad from the same sender).
const (
	Accept Verdict = iota
	Reject
	Ignore
)

func (v Verdict) String() string {
	switch v {
	case Accept:
		return "accept"
	case Reject:
		return "reject"
	case Ignore:
		return "ignore"
	}
	return fmt.Sprintf("verdict(%d)", uint8(v))
}

// Reason says why a message was not accepted. Its String is the label used in
// Stats and logs.
type Reason uint8

// The reasons, with the verdict each carries.
const (
	ReasonNone Reason = iota
	// Reject: the envelope is larger than MaxEnvelopeSize.
	ReasonOversized
	// Reject: the bytes are not a protobuf Envelope.
	ReasonMalformed
	// Reject: the envelope's version is not Version.
	ReasonVersion
	// Reject: the envelope carries no body, or one that does not belong on
	// the topic it came by.
	ReasonUnexpectedBody
	// Reject: the sender field is not a peer ID.
	ReasonBadSender
	// Reject: the sender field names another peer than the message's signer.
	ReasonForgedSender
	// Reject: a field is out of range, inconsistent or absurd (negative,
	// NaN, a million cards, an expiry beyond MaxTTL).
	ReasonBadField
	// Reject: gossipsub found no signature (the mesh runs StrictSign).
	ReasonUnsigned
	// Reject: gossipsub found a signature that does not verify.
	ReasonBadSignature
	// Reject: another protocol-level fault gossipsub reported (a message
	// claiming to be our own, unexpected author fields).
	ReasonProtocol
	// Ignore: the message expired before it reached us.
	ReasonExpired
	// Ignore: the message was issued further in the future than MaxClockSkew.
	ReasonFuture
	// Ignore: we already hold a newer message from the same sender.
	ReasonStale
	// Ignore: we already hold this sequence number from the same sender.
	ReasonDuplicate
	// Ignore: gossipsub dropped the message before validation because its
	// validation queue was full, or the peer or author is blacklisted.
	ReasonThrottled
	// Reject: the hardware evidence of a card group does not parse (an
	// entry without a UUID or serial, a label too long, a UUID twice,
	// more entries than cards).
	ReasonBadEvidence

	numReasons
)

var reasonNames = [numReasons]string{
	ReasonNone:           "none",
	ReasonOversized:      "oversized",
	ReasonMalformed:      "malformed",
	ReasonVersion:        "wrong version",
	ReasonUnexpectedBody: "unexpected body",
	ReasonBadSender:      "bad sender",
	ReasonForgedSender:   "forged sender",
	ReasonBadField:       "bad field",
	ReasonUnsigned:       "unsigned",
	ReasonBadSignature:   "bad signature",
	ReasonProtocol:       "protocol fault",
	ReasonExpired:        "expired",
	ReasonFuture:         "from the future",
	ReasonStale:          "stale seq",
	ReasonDuplicate:      "duplicate seq",
	ReasonThrottled:      "throttled",
	ReasonBadEvidence:    "bad evidence",
}

func (r Reason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// Verdict returns the verdict a message dropped for this reason gets.
// ReasonNone is Accept.
func (r Reason) Verdict() Verdict {
	switch r {
	case ReasonNone:
		return Accept
	case ReasonExpired, ReasonFuture, ReasonStale, ReasonDuplicate, ReasonThrottled:
		return Ignore
	}
	return Reject
}

// MessageError is why a message from a peer is not accepted. errors.Is
// matches it against the sentinel of its reason (ErrStale, ...).
type MessageError struct {
	Reason Reason
	Detail string // what exactly was wrong; empty in the sentinels
	// Version is the wire version the message carried, for ReasonVersion.
	Version uint32
}

func (e *MessageError) Error() string {
	if e.Detail == "" {
		return "gossip: " + e.Reason.String()
	}
	return "gossip: " + e.Reason.String() + ": " + e.Detail
}

// Is reports whether target is the sentinel of e's reason.
func (e *MessageError) Is(target error) bool {
	t, ok := target.(*MessageError)
	return ok && t.Detail == "" && t.Reason == e.Reason
}

// Sentinels for errors.Is, one per reason a message is refused.
var (
	ErrOversized      = &MessageError{Reason: ReasonOversized}
	ErrMalformed      = &MessageError{Reason: ReasonMalformed}
	ErrVersion        = &MessageError{Reason: ReasonVersion}
	ErrUnexpectedBody = &MessageError{Reason: ReasonUnexpectedBody}
	ErrBadSender      = &MessageError{Reason: ReasonBadSender}
	ErrForgedSender   = &MessageError{Reason: ReasonForgedSender}
	ErrBadField       = &MessageError{Reason: ReasonBadField}
	ErrExpired        = &MessageError{Reason: ReasonExpired}
	ErrFuture         = &MessageError{Reason: ReasonFuture}
	ErrStale          = &MessageError{Reason: ReasonStale}
	ErrDuplicate      = &MessageError{Reason: ReasonDuplicate}
	ErrBadEvidence    = &MessageError{Reason: ReasonBadEvidence}
)

// ReasonOf returns the reason carried by err, ReasonNone for nil and
// ReasonMalformed for an error that is not a *MessageError.
func ReasonOf(err error) Reason {
	if err == nil {
		return ReasonNone
	}
	var me *MessageError
	if errors.As(err, &me) {
		return me.Reason
	}
	return ReasonMalformed
}

func msgErr(r Reason, format string, args ...any) error {
	return &MessageError{Reason: r, Detail: fmt.Sprintf(format, args...)}
}
