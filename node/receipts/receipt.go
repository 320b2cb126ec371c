// Package receipts makes a job's bill something anyone can check. A runner
// signs what an attempt used so far — job, share, epoch, card-seconds — with
// its libp2p identity key (a Receipt), and the job's coordinator
// countersigns each receipt it accepts into the bill. A job's bill is the
// chain of its receipts: every one names the hash of the one before it in
// its attempt, so a receipt left out or altered shows.
//
// A receipt travels inside a lease renewal every Interval (5 s) and with
// the attempt's end, not with every renewal: renewals go out five times a
// second, and a signed receipt on each would add about 40% to the lease
// traffic; one every 5 s adds about 2% (BenchmarkLeaseBytes). The
// coordinator bills only the usage receipts carry (market.Config.
// BillOnlyReceipts), so a bill is exactly the sum of its receipts; a runner
// that dies loses at most the last Interval of its usage.
//
// Verify checks a bill from its receipts alone: every signature (the peer
// IDs are ed25519 keys), the chain, the epoch fencing against the job's
// placements, and the sums. It needs no network and trusts no node.
package receipts

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
	"unicode/utf8"
)

// Receipt is one signed statement of an attempt's usage so far.
type Receipt struct {
	// Network is the mesh's name: a receipt of one mesh means nothing in
	// another.
	Network string `json:"network"`
	Job     string `json:"job"`
	// Owner is the job's owner ID ("o1…"): whom the usage is billed to.
	Owner string `json:"owner"`
	Share int    `json:"share"`
	Epoch uint64 `json:"epoch"`
	// Term is the coordinator term the runner renewed under.
	Term uint64 `json:"term"`
	// Runner and Coordinator are libp2p peer IDs (ed25519 keys).
	Runner      string `json:"runner"`
	Coordinator string `json:"coordinator"`
	// Seq numbers the attempt's receipts from 1; Prev is the Hash of
	// receipt Seq-1 of the attempt (zero for the first).
	Seq  uint64   `json:"seq"`
	Prev [32]byte `json:"prev"`
	// At is when the runner signed, by its clock (millisecond precision).
	At time.Time `json:"at"`
	// Cards and PriceCNY are the attempt's card count and awarded price
	// per card-hour; CardSeconds the usage so far (cumulative).
	Cards       int     `json:"cards"`
	PriceCNY    float64 `json:"price_cny"`
	CardSeconds float64 `json:"card_seconds"`
	// Final says the attempt has ended: no receipt follows.
	Final bool `json:"final,omitempty"`
	// RunnerSig signs Body; CoordSig signs Body and RunnerSig (Accepted).
	RunnerSig []byte `json:"runner_sig"`
	CoordSig  []byte `json:"coord_sig,omitempty"`
}

// Limits of a receipt's fields.
const (
	maxText = 256 // network, job, owner, peer IDs
	// MaxWireBytes bounds an encoded receipt.
	MaxWireBytes = 2048
	// maxCardSeconds is a century of 4096 cards.
	maxCardSeconds = 4096 * 100 * 365 * 24 * 3600.0
)

const (
	bodyDomain   = "gpumesh-receipt-v1\x00"
	acceptDomain = "gpumesh-receipt-accept-v1\x00"
)

// CostCNY is what the receipt's usage costs: card-seconds × price / 3600.
func (r *Receipt) CostCNY() float64 { return r.CardSeconds * r.PriceCNY / 3600 }

// Body is what the runner signs: every field but the signatures, in a
// fixed binary form after a domain string.
func (r *Receipt) Body() []byte {
	b := make([]byte, 0, 256)
	b = append(b, bodyDomain...)
	for _, s := range []string{r.Network, r.Job, r.Owner, r.Runner, r.Coordinator} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.AppendUvarint(b, uint64(r.Share))
	b = binary.AppendUvarint(b, r.Epoch)
	b = binary.AppendUvarint(b, r.Term)
	b = binary.AppendUvarint(b, r.Seq)
	b = append(b, r.Prev[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(r.At.UnixMilli()))
	b = binary.AppendUvarint(b, uint64(r.Cards))
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(r.PriceCNY))
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(r.CardSeconds))
	final := byte(0)
	if r.Final {
		final = 1
	}
	return append(b, final)
}

// Hash is the SHA-256 of Body: what the next receipt of the attempt names
// as Prev.
func (r *Receipt) Hash() [32]byte { return sha256.Sum256(r.Body()) }

// Repeats reports whether r is prev sent again: the same place in the
// attempt's chain and the same body.
func (r *Receipt) Repeats(prev *Receipt) bool { return r.Seq == prev.Seq && r.Hash() == prev.Hash() }

// acceptMessage is what the coordinator signs.
func (r *Receipt) acceptMessage() []byte {
	m := append([]byte(acceptDomain), r.Body()...)
	return append(m, r.RunnerSig...)
}

// Sign signs r as its runner with key.
func (r *Receipt) Sign(key ed25519.PrivateKey) { r.RunnerSig = ed25519.Sign(key, r.Body()) }

// Accept countersigns r as its coordinator with key.
func (r *Receipt) Accept(key ed25519.PrivateKey) { r.CoordSig = ed25519.Sign(key, r.acceptMessage()) }

// Errors of the checks.
var (
	// ErrMalformed: the bytes are not a receipt, or a field is out of
	// range.
	ErrMalformed = errors.New("malformed receipt")
	// ErrBadSignature: a signature does not verify for the peer it
	// names.
	ErrBadSignature = errors.New("receipt signature does not verify")
)

// Check checks r's fields (not its signatures).
func (r *Receipt) Check() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
	}
	for _, f := range []struct{ name, v string }{{"network", r.Network}, {"job", r.Job}, {"owner", r.Owner}, {"runner", r.Runner}, {"coordinator", r.Coordinator}} {
		if len(f.v) > maxText || !utf8.ValidString(f.v) {
			return bad("%s: over %d bytes or not UTF-8", f.name, maxText)
		}
	}
	switch {
	case r.Job == "" || r.Runner == "" || r.Coordinator == "":
		return bad("job, runner and coordinator are required")
	case r.Share < 0 || r.Share > 1<<20:
		return bad("share %d out of range", r.Share)
	case r.Epoch == 0 || r.Seq == 0:
		return bad("epoch %d, seq %d: both start at 1", r.Epoch, r.Seq)
	case r.Cards < 1 || r.Cards > 4096:
		return bad("%d cards: want 1 to 4096", r.Cards)
	case !(r.PriceCNY >= 0 && r.PriceCNY <= 100_000):
		return bad("price %v CNY per card-hour out of range", r.PriceCNY)
	case !(r.CardSeconds >= 0 && r.CardSeconds <= maxCardSeconds):
		return bad("%v card-seconds out of range", r.CardSeconds)
	case r.At.UnixMilli() <= 0:
		return bad("signed at %s: before 1970", r.At)
	case r.Seq == 1 && r.Prev != [32]byte{}:
		return bad("the first receipt of an attempt names a previous one")
	case len(r.RunnerSig) != ed25519.SignatureSize:
		return bad("runner signature of %d bytes, want %d", len(r.RunnerSig), ed25519.SignatureSize)
	case len(r.CoordSig) != 0 && len(r.CoordSig) != ed25519.SignatureSize:
		return bad("coordinator signature of %d bytes, want %d", len(r.CoordSig), ed25519.SignatureSize)
	}
	return nil
}

// VerifyRunner checks r's fields and the runner's signature with its key.
func (r *Receipt) VerifyRunner(runner ed25519.PublicKey) error {
	if err := r.Check(); err != nil {
		return err
	}
	if !ed25519.Verify(runner, r.Body(), r.RunnerSig) {
		return fmt.Errorf("%w: runner %s", ErrBadSignature, short(r.Runner))
	}
	return nil
}

// VerifyAccepted checks r's fields and both signatures.
func (r *Receipt) VerifyAccepted(runner, coord ed25519.PublicKey) error {
	if err := r.VerifyRunner(runner); err != nil {
		return err
	}
	if len(r.CoordSig) == 0 {
		return fmt.Errorf("%w: not countersigned by its coordinator", ErrBadSignature)
	}
	if !ed25519.Verify(coord, r.acceptMessage(), r.CoordSig) {
		return fmt.Errorf("%w: coordinator %s", ErrBadSignature, short(r.Coordinator))
	}
	return nil
}

// Marshal encodes r as it travels and is stored: Body, then the two
// signatures, each after its length.
func (r *Receipt) Marshal() []byte {
	b := r.Body()
	b = binary.AppendUvarint(b, uint64(len(r.RunnerSig)))
	b = append(b, r.RunnerSig...)
	b = binary.AppendUvarint(b, uint64(len(r.CoordSig)))
	return append(b, r.CoordSig...)
}

// Unmarshal decodes what Marshal wrote and checks the fields (not the
// signatures). Any error wraps ErrMalformed.
func Unmarshal(b []byte) (Receipt, error) {
	var r Receipt
	if len(b) > MaxWireBytes {
		return r, fmt.Errorf("%w: %d bytes, at most %d", ErrMalformed, len(b), MaxWireBytes)
	}
	d := decoder{b: b}
	if string(d.take(len(bodyDomain))) != bodyDomain {
		return r, fmt.Errorf("%w: not a gpumesh receipt (version 1)", ErrMalformed)
	}
	r.Network, r.Job, r.Owner, r.Runner, r.Coordinator = d.str(), d.str(), d.str(), d.str(), d.str()
	r.Share = int(d.uvarint(1 << 20))
	r.Epoch, r.Term, r.Seq = d.uvarint(math.MaxUint64), d.uvarint(math.MaxUint64), d.uvarint(math.MaxUint64)
	copy(r.Prev[:], d.take(32))
	r.At = time.UnixMilli(int64(d.u64() & math.MaxInt64)).UTC()
	r.Cards = int(d.uvarint(4096))
	r.PriceCNY = math.Float64frombits(d.u64())
	r.CardSeconds = math.Float64frombits(d.u64())
	switch f := d.take(1); {
	case len(f) == 1 && f[0] <= 1:
		r.Final = f[0] == 1
	default:
		d.fail("final flag")
	}
	r.RunnerSig = d.bytes(ed25519.SignatureSize)
	r.CoordSig = d.bytes(ed25519.SignatureSize)
	if d.err == nil && len(d.b) != 0 {
		d.fail(fmt.Sprintf("%d bytes after the end", len(d.b)))
	}
	if d.err != nil {
		return Receipt{}, fmt.Errorf("%w: %v", ErrMalformed, d.err)
	}
	if len(r.CoordSig) == 0 {
		r.CoordSig = nil
	}
	if err := r.Check(); err != nil {
		return Receipt{}, err
	}
	if !bytes.Equal(r.Marshal(), b) {
		return Receipt{}, fmt.Errorf("%w: not in canonical form", ErrMalformed)
	}
	return r, nil
}

// decoder reads Marshal's form, remembering the first failure.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = errors.New(what)
	}
}

func (d *decoder) take(n int) []byte {
	if d.err != nil || n < 0 || len(d.b) < n {
		d.fail("truncated")
		return nil
	}
	out := d.b[:n]
	d.b = d.b[n:]
	return out
}

func (d *decoder) uvarint(limit uint64) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 || v > limit {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) u64() uint64 {
	b := d.take(8)
	if b == nil {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}

func (d *decoder) str() string { return string(d.take(int(d.uvarint(maxText)))) }

func (d *decoder) bytes(limit int) []byte {
	return append([]byte(nil), d.take(int(d.uvarint(uint64(limit))))...)
}

// short shortens a peer ID as the CLI prints it.
func short(id string) string {
	if len(id) <= 10 {
		return id
	}
	return id[:2] + "*" + id[len(id)-6:]
}
