package mesh

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// A packet stream carries memberlist packets between two peers as frames:
// an unsigned varint length (1 to 3 bytes) followed by that many bytes of
// packet. A frame is never empty and never longer than the reader's limit; a
// stream that breaks either rule is malformed and is reset.

// maxFrameSize bounds the packets the transport accepts from a peer. It is
// well above the packet size of any profile (Profile.PacketSize, at most
// 64 KiB) plus memberlist's label and encryption overhead.
const maxFrameSize = 128 << 10

// ErrMalformedFrame reports a packet stream that broke the framing rules.
var ErrMalformedFrame = errors.New("malformed frame")

// appendFrame appends payload to dst as one frame.
func appendFrame(dst, payload []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(payload)))
	return append(dst, payload...)
}

// frameReader reads frames from a packet stream.
type frameReader struct {
	r   *bufio.Reader
	max int
}

// newFrameReader reads frames of at most max bytes from r. Its buffer is
// small: most packets are a few hundred bytes, and readers are many.
func newFrameReader(r io.Reader, max int) *frameReader {
	return &frameReader{r: bufio.NewReaderSize(r, 512), max: max}
}

// next returns the next frame's payload in a new slice (memberlist keeps
// packets after the call). It returns io.EOF at a clean end of stream, an
// error wrapping ErrMalformedFrame for a bad length, and io.ErrUnexpectedEOF
// for a stream cut inside a frame.
func (f *frameReader) next() ([]byte, error) {
	n, err := f.length()
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: empty frame", ErrMalformedFrame)
	}
	if n > f.max {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrMalformedFrame, n, f.max)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(f.r, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return buf, nil
}

// maxLengthBytes is the longest varint length prefix: 3 bytes hold 21 bits,
// more than maxFrameSize needs.
const maxLengthBytes = 3

// length reads a frame's varint length prefix.
func (f *frameReader) length() (int, error) {
	var n int
	for i := 0; i < maxLengthBytes; i++ {
		b, err := f.r.ReadByte()
		if err != nil {
			if i > 0 && errors.Is(err, io.EOF) {
				return 0, io.ErrUnexpectedEOF
			}
			return 0, err
		}
		n |= int(b&0x7f) << (7 * i)
		if b < 0x80 {
			return n, nil
		}
	}
	return 0, fmt.Errorf("%w: length prefix longer than %d bytes", ErrMalformedFrame, maxLengthBytes)
}

// varintLen is the size of n's varint length prefix.
func varintLen(n int) int {
	size := 1
	for n >= 0x80 {
		n >>= 7
		size++
	}
	return size
}
