package transfer

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/gpumesh/gpumesh/node/blob"
)

// The wire protocol. A stream carries one request and its answer, as
// frames: a type byte, an unsigned varint length and that many bytes of
// payload. Digests travel as their 32 raw bytes, integers as unsigned
// varints. See doc.go for the exchanges.
const (
	frameGet     byte = 'G' // scope, then 1 to MaxBatch digests: send these objects
	frameHas     byte = 'H' // scope, then 1 to MaxBatch digests: which do you hold?
	framePush    byte = 'P' // scope: fetch this manifest from me
	frameObject  byte = 'O' // kind, digest, size: the object follows in DATA frames
	frameData    byte = 'D' // 1 to MaxData bytes of the current object
	frameMissing byte = 'M' // digest: not held
	frameHave    byte = 'V' // count, then a bitmap: bit i set if digest i is held
	frameError   byte = 'E' // code, then a message: the request is refused or failed
	frameDone    byte = 'K' // chunks, bytes: a push was fetched whole
)

// Limits of the protocol.
const (
	// MaxBatch is the most digests one GET or HAS names.
	MaxBatch = 1024
	// MaxData is the largest DATA frame.
	MaxData = 256 << 10
	// maxMessage bounds an ERROR frame's message.
	maxMessage = 1024
	// maxControl is the largest frame of any type but DATA.
	maxControl = digestLen + MaxBatch*digestLen
	digestLen  = len(blob.Digest{})
)

// ErrMalformed reports a frame that breaks the protocol's rules. A peer
// that sends one is dropped from the transfer.
var ErrMalformed = errors.New("transfer: malformed frame")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// maxPayload is the largest payload a frame of type t may carry, or -1 for
// an unknown type.
func maxPayload(t byte) int {
	switch t {
	case frameData:
		return MaxData
	case frameGet, frameHas, frameHave:
		return maxControl
	case framePush, frameMissing:
		return digestLen
	case frameObject:
		return 1 + digestLen + binary.MaxVarintLen64
	case frameError:
		return 1 + maxMessage
	case frameDone:
		return 2 * binary.MaxVarintLen64
	}
	return -1
}

// writeFrame writes one frame.
func writeFrame(w *bufio.Writer, t byte, payload []byte) error {
	var hdr [1 + binary.MaxVarintLen64]byte
	hdr[0] = t
	n := binary.PutUvarint(hdr[1:], uint64(len(payload)))
	if _, err := w.Write(hdr[:1+n]); err != nil {
		return err
	}
	_, err := w.Write(payload)
	return err
}

// readFrame reads one frame, its payload into buf when it fits (else a
// new slice). It returns io.EOF at a clean end of stream before a frame,
// io.ErrUnexpectedEOF inside one, and an error wrapping ErrMalformed for
// an unknown type or a payload over its type's limit (or empty where
// that is not allowed).
func readFrame(r *bufio.Reader, buf []byte) (byte, []byte, error) {
	t, err := r.ReadByte()
	if err != nil {
		return 0, nil, err
	}
	limit := maxPayload(t)
	if limit < 0 {
		return 0, nil, malformed("unknown frame type %#x", t)
	}
	n, err := readLength(r)
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		if errors.Is(err, ErrMalformed) {
			err = fmt.Errorf("frame %q: %w", t, err)
		}
		return 0, nil, err
	}
	if n > uint64(limit) {
		return 0, nil, malformed("frame %q of %d bytes, over its limit of %d", t, n, limit)
	}
	if n == 0 && t == frameData {
		return 0, nil, malformed("empty DATA frame")
	}
	p := buf
	if int(n) > cap(p) {
		p = make([]byte, n)
	}
	p = p[:n]
	if _, err := io.ReadFull(r, p); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return t, p, nil
}

// readLength reads a frame's length: a varint in its shortest form, of
// at most 4 bytes (a limit is 256 KiB).
func readLength(r *bufio.Reader) (uint64, error) {
	var v uint64
	for i := 0; i < 4; i++ {
		b, err := r.ReadByte()
		if err != nil {
			return 0, err
		}
		v |= uint64(b&0x7f) << (7 * i)
		if b < 0x80 {
			if b == 0 && i > 0 {
				return 0, malformed("length not in its shortest form")
			}
			return v, nil
		}
	}
	return 0, malformed("length over 4 bytes")
}

// uvarint decodes a varint in its shortest form from the front of p.
func uvarint(p []byte) (uint64, int) {
	v, n := binary.Uvarint(p)
	if n <= 0 || n != len(binary.AppendUvarint(nil, v)) {
		return 0, -1
	}
	return v, n
}

// request is a GET, HAS or PUSH.
type request struct {
	typ     byte
	scope   blob.Digest
	digests []blob.Digest // none for PUSH
}

func (q request) encode() []byte {
	b := make([]byte, 0, digestLen*(1+len(q.digests)))
	b = append(b, q.scope[:]...)
	for _, d := range q.digests {
		b = append(b, d[:]...)
	}
	return b
}

// decodeRequest reads a request's payload.
func decodeRequest(t byte, p []byte) (request, error) {
	q := request{typ: t}
	switch t {
	case frameGet, frameHas, framePush:
	default:
		return q, malformed("frame %q is not a request", t)
	}
	if len(p) < digestLen || len(p)%digestLen != 0 {
		return q, malformed("request of %d bytes: want whole digests", len(p))
	}
	copy(q.scope[:], p)
	n := len(p)/digestLen - 1
	switch {
	case t == framePush && n != 0:
		return q, malformed("PUSH names %d digests besides its manifest", n)
	case t != framePush && (n < 1 || n > MaxBatch):
		return q, malformed("request names %d digests: want 1 to %d", n, MaxBatch)
	}
	if q.scope.IsZero() {
		return q, malformed("request for the zero digest")
	}
	for i := range n {
		var d blob.Digest
		copy(d[:], p[digestLen*(i+1):])
		if d.IsZero() {
			return q, malformed("request for the zero digest")
		}
		q.digests = append(q.digests, d)
	}
	return q, nil
}

// objectHeader announces an object's bytes.
type objectHeader struct {
	kind   blob.Kind
	digest blob.Digest
	size   int64
}

func (o objectHeader) encode() []byte {
	b := append([]byte{byte(o.kind)}, o.digest[:]...)
	return binary.AppendUvarint(b, uint64(o.size))
}

// decodeObject reads an OBJECT payload, refusing an object over its
// kind's size limit before any of its bytes are read.
func decodeObject(p []byte) (objectHeader, error) {
	var o objectHeader
	if len(p) < 1+digestLen+1 {
		return o, malformed("OBJECT of %d bytes", len(p))
	}
	o.kind = blob.Kind(p[0])
	copy(o.digest[:], p[1:])
	size, n := uvarint(p[1+digestLen:])
	if n <= 0 || 1+digestLen+n != len(p) {
		return o, malformed("OBJECT size is not one varint")
	}
	limit := uint64(blob.MaxChunkSize)
	switch o.kind {
	case blob.KindChunk:
	case blob.KindManifest:
		limit = blob.MaxManifestSize
	default:
		return o, malformed("OBJECT of kind %d", p[0])
	}
	if size < 1 || size > limit {
		return o, malformed("%s %s of %d bytes: want 1 to %d", o.kind, o.digest.Short(), size, limit)
	}
	o.size = int64(size)
	return o, nil
}

// decodeDigest reads a MISSING payload.
func decodeDigest(p []byte) (blob.Digest, error) {
	var d blob.Digest
	if len(p) != digestLen {
		return d, malformed("digest of %d bytes", len(p))
	}
	copy(d[:], p)
	return d, nil
}

// encodeHave encodes which of n digests are held.
func encodeHave(held []bool) []byte {
	b := binary.AppendUvarint(nil, uint64(len(held)))
	bits := make([]byte, (len(held)+7)/8)
	for i, h := range held {
		if h {
			bits[i/8] |= 1 << (i % 8)
		}
	}
	return append(b, bits...)
}

// decodeHave reads a HAVE payload that answers n digests.
func decodeHave(p []byte, n int) ([]bool, error) {
	count, k := uvarint(p)
	if k <= 0 || count != uint64(n) {
		return nil, malformed("HAVE answers %d digests, %d were asked", count, n)
	}
	bits := p[k:]
	if len(bits) != (n+7)/8 {
		return nil, malformed("HAVE bitmap of %d bytes for %d digests", len(bits), n)
	}
	if n%8 != 0 && bits[len(bits)-1]>>(n%8) != 0 {
		return nil, malformed("HAVE sets bits past its count")
	}
	held := make([]bool, n)
	for i := range held {
		held[i] = bits[i/8]&(1<<(i%8)) != 0
	}
	return held, nil
}

// Code classifies an ERROR frame.
type Code byte

// The error codes.
const (
	CodeDenied     Code = 1 // the Authorizer refused
	CodeBadRequest Code = 2 // the request broke the protocol's rules
	CodeQuota      Code = 3 // the receiver's store is full
	CodeBusy       Code = 4 // too many requests in progress
	CodeFailed     Code = 5 // anything else
)

func (c Code) String() string {
	switch c {
	case CodeDenied:
		return "denied"
	case CodeBadRequest:
		return "bad request"
	case CodeQuota:
		return "store full"
	case CodeBusy:
		return "busy"
	case CodeFailed:
		return "failed"
	}
	return fmt.Sprintf("code %d", byte(c))
}

func encodeError(c Code, msg string) []byte {
	if len(msg) > maxMessage {
		msg = msg[:maxMessage]
		for !utf8.ValidString(msg) {
			msg = msg[:len(msg)-1]
		}
	}
	return append([]byte{byte(c)}, msg...)
}

func decodeError(p []byte) (Code, string, error) {
	if len(p) < 1 {
		return 0, "", malformed("empty ERROR")
	}
	c := Code(p[0])
	if c < CodeDenied || c > CodeFailed {
		return 0, "", malformed("ERROR code %d", p[0])
	}
	msg := string(p[1:])
	if !utf8.ValidString(msg) {
		return 0, "", malformed("ERROR message is not UTF-8")
	}
	return c, msg, nil
}

func encodeDone(chunks int, bytes int64) []byte {
	b := binary.AppendUvarint(nil, uint64(chunks))
	return binary.AppendUvarint(b, uint64(bytes))
}

func decodeDone(p []byte) (int, int64, error) {
	chunks, n := uvarint(p)
	if n <= 0 || chunks > 1<<40 {
		return 0, 0, malformed("DONE chunk count")
	}
	bytes, m := uvarint(p[n:])
	if m <= 0 || n+m != len(p) || bytes > 1<<62 {
		return 0, 0, malformed("DONE byte count")
	}
	return int(chunks), int64(bytes), nil
}
