package mesh

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	payloads := [][]byte{{1}, bytes.Repeat([]byte{7}, 127), bytes.Repeat([]byte{8}, 128), bytes.Repeat([]byte{9}, 16<<10), bytes.Repeat([]byte{3}, maxFrameSize)}
	var stream []byte
	for _, p := range payloads {
		stream = appendFrame(stream, p)
	}
	fr := newFrameReader(bytes.NewReader(stream), maxFrameSize)
	for i, want := range payloads {
		got, err := fr.next()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("frame %d: %d bytes, want %d", i, len(got), len(want))
		}
	}
	if _, err := fr.next(); err != io.EOF {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
}

func TestFrameReaderRejectsBadStreams(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stream []byte
		want   error
	}{
		{"empty frame", []byte{0}, ErrMalformedFrame},
		{"over the limit", appendFrame(nil, make([]byte, 101)), ErrMalformedFrame},
		{"length too long", []byte{0x80, 0x80, 0x80, 0x01}, ErrMalformedFrame},
		{"huge length", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, ErrMalformedFrame},
		{"cut in the length", []byte{0x80}, io.ErrUnexpectedEOF},
		{"cut in the payload", []byte{5, 1, 2}, io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := newFrameReader(bytes.NewReader(tc.stream), 100).next()
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestVarintLen(t *testing.T) {
	for _, n := range []int{1, 127, 128, 16383, 16384, maxFrameSize} {
		if got, want := varintLen(n), len(appendFrame(nil, make([]byte, n)))-n; got != want {
			t.Errorf("varintLen(%d) = %d, want %d", n, got, want)
		}
	}
}

// FuzzFrameReader feeds arbitrary bytes to the packet stream decoder: it must
// never panic, never return a frame over the limit or an empty one, and the
// frames it returns must re-encode to a prefix of the input.
func FuzzFrameReader(f *testing.F) {
	f.Add(appendFrame(appendFrame(nil, []byte("ping")), []byte("ack")))
	f.Add([]byte{0})
	f.Add([]byte{0x80, 0x80, 0x80, 0x80})
	f.Add([]byte{0xff, 0x7f})
	f.Fuzz(func(t *testing.T, data []byte) {
		const limit = 1 << 12
		fr := newFrameReader(bytes.NewReader(data), limit)
		var again []byte
		for {
			frame, err := fr.next()
			if err != nil {
				if err != io.EOF && !errors.Is(err, ErrMalformedFrame) && err != io.ErrUnexpectedEOF {
					t.Fatalf("unexpected error kind: %v", err)
				}
				break
			}
			if len(frame) == 0 || len(frame) > limit {
				t.Fatalf("frame of %d bytes", len(frame))
			}
			again = appendFrame(again, frame)
		}
		// Non-minimal length prefixes decode too; compare lengths of
		// payload only when the encoding is canonical.
		if len(again) > len(data) {
			t.Fatalf("decoded more than was given: %d > %d", len(again), len(data))
		}
	})
}
