package transfer

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"

	"github.com/gpumesh/gpumesh/node/blob"
)

func frame(t byte, payload []byte) []byte {
	var b bytes.Buffer
	w := bufio.NewWriter(&b)
	writeFrame(w, t, payload)
	w.Flush()
	return b.Bytes()
}

func TestFramesRoundTrip(t *testing.T) {
	d1, d2 := blob.Sum([]byte("1")), blob.Sum([]byte("2"))
	q := request{typ: frameGet, scope: d1, digests: []blob.Digest{d1, d2}}
	o := objectHeader{kind: blob.KindChunk, digest: d2, size: blob.MaxChunkSize}
	held := []bool{true, false, false, true, true, false, false, false, true}
	var stream []byte
	stream = append(stream, frame(frameGet, q.encode())...)
	stream = append(stream, frame(frameObject, o.encode())...)
	stream = append(stream, frame(frameData, []byte("bytes"))...)
	stream = append(stream, frame(frameHave, encodeHave(held))...)
	stream = append(stream, frame(frameError, encodeError(CodeQuota, "full"))...)
	stream = append(stream, frame(frameDone, encodeDone(7, 1<<40))...)
	r := bufio.NewReader(bytes.NewReader(stream))

	typ, p, err := readFrame(r, nil)
	if got, err2 := decodeRequest(typ, p); err != nil || err2 != nil || got.scope != d1 || !slices.Equal(got.digests, q.digests) {
		t.Fatalf("request: %+v, %v, %v", got, err, err2)
	}
	_, p, _ = readFrame(r, nil)
	if got, err := decodeObject(p); err != nil || got != o {
		t.Fatalf("object: %+v, %v", got, err)
	}
	_, p, _ = readFrame(r, make([]byte, 2))
	if string(p) != "bytes" {
		t.Fatalf("data: %q", p)
	}
	_, p, _ = readFrame(r, nil)
	if got, err := decodeHave(p, len(held)); err != nil || !slices.Equal(got, held) {
		t.Fatalf("have: %v, %v", got, err)
	}
	_, p, _ = readFrame(r, nil)
	if c, msg, err := decodeError(p); err != nil || c != CodeQuota || msg != "full" {
		t.Fatalf("error: %v %q %v", c, msg, err)
	}
	_, p, _ = readFrame(r, nil)
	if n, b, err := decodeDone(p); err != nil || n != 7 || b != 1<<40 {
		t.Fatalf("done: %d %d %v", n, b, err)
	}
	if _, _, err := readFrame(r, nil); err != io.EOF {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
}

func TestReadFrameRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		want error
	}{
		{"unknown type", []byte{'Z', 0}, ErrMalformed},
		{"data over its limit", frame(frameData, make([]byte, MaxData+1)), ErrMalformed},
		{"empty data", []byte{frameData, 0}, ErrMalformed},
		{"error over its limit", frame(frameError, make([]byte, 2+maxMessage)), ErrMalformed},
		{"length overflow", []byte{frameData, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, ErrMalformed},
		{"cut in the length", []byte{frameData, 0x80}, io.ErrUnexpectedEOF},
		{"cut in the payload", []byte{frameData, 5, 'a'}, io.ErrUnexpectedEOF},
	} {
		if _, _, err := readFrame(bufio.NewReader(bytes.NewReader(tc.in)), nil); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestDecodersRefuse(t *testing.T) {
	d := blob.Sum([]byte("d"))
	zero := blob.Digest{}
	cases := map[string]error{}
	_, cases["request of half a digest"] = decodeRequest(frameGet, d[:16])
	_, cases["get of nothing"] = decodeRequest(frameGet, d[:])
	_, cases["get of too much"] = decodeRequest(frameGet, bytes.Repeat(d[:], MaxBatch+2))
	_, cases["push with digests"] = decodeRequest(framePush, append(d[:], d[:]...))
	_, cases["zero scope"] = decodeRequest(frameGet, append(zero[:], d[:]...))
	_, cases["zero digest"] = decodeRequest(frameHas, append(d[:], zero[:]...))
	_, cases["not a request"] = decodeRequest(frameData, d[:])
	_, cases["object of kind 9"] = decodeObject(objectHeader{kind: 9, digest: d, size: 1}.encode())
	_, cases["empty object"] = decodeObject(objectHeader{kind: blob.KindChunk, digest: d, size: 0}.encode())
	_, cases["huge manifest"] = decodeObject(objectHeader{kind: blob.KindManifest, digest: d, size: blob.MaxManifestSize + 1}.encode())
	_, cases["object with a tail"] = decodeObject(append(objectHeader{kind: blob.KindChunk, digest: d, size: 1}.encode(), 0))
	_, cases["have of another count"] = decodeHave(encodeHave([]bool{true}), 2)
	_, cases["have with stray bits"] = decodeHave([]byte{1, 0xfe}, 1)
	_, _, cases["error code 0"] = decodeError([]byte{0})
	_, _, cases["error not UTF-8"] = decodeError([]byte{1, 0xff})
	_, _, cases["done with a tail"] = decodeDone(append(encodeDone(1, 1), 0))
	_, cases["missing of 3 bytes"] = decodeDigest([]byte{1, 2, 3})
	for name, err := range cases {
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

// FuzzReadFrame: no byte string makes the reader or a decoder panic or
// take a frame over its limit; what decodes encodes back to the same.
func FuzzReadFrame(f *testing.F) {
	d := blob.Sum([]byte("d"))
	f.Add(frame(frameGet, request{scope: d, digests: []blob.Digest{d}}.encode()))
	f.Add(frame(frameObject, objectHeader{kind: blob.KindManifest, digest: d, size: 300}.encode()))
	f.Add(frame(frameHave, encodeHave([]bool{true, false, true})))
	f.Add(frame(frameError, encodeError(CodeDenied, "no")))
	f.Add(frame(frameDone, encodeDone(3, 4)))
	f.Add(frame(frameData, []byte("x")))
	f.Add(frame(frameMissing, d[:]))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bufio.NewReader(bytes.NewReader(in))
		for {
			typ, p, err := readFrame(r, nil)
			if err != nil {
				return
			}
			if len(p) > maxPayload(typ) {
				t.Fatalf("frame %q of %d bytes passed", typ, len(p))
			}
			switch typ {
			case frameGet, frameHas, framePush:
				if q, err := decodeRequest(typ, p); err == nil && !bytes.Equal(q.encode(), p) {
					t.Fatalf("request %x re-encodes as %x", p, q.encode())
				}
			case frameObject:
				if o, err := decodeObject(p); err == nil && !bytes.Equal(o.encode(), p) {
					t.Fatalf("object %x re-encodes as %x", p, o.encode())
				}
			case frameHave:
				for n := range 2 * len(p) {
					if held, err := decodeHave(p, n); err == nil && !bytes.Equal(encodeHave(held), p) {
						t.Fatalf("have %x re-encodes as %x", p, encodeHave(held))
					}
				}
			case frameError:
				if c, msg, err := decodeError(p); err == nil && !bytes.Equal(encodeError(c, msg), p) {
					t.Fatalf("error %x re-encodes differently", p)
				}
			case frameDone:
				if n, b, err := decodeDone(p); err == nil && !bytes.Equal(encodeDone(n, b), p) {
					t.Fatalf("done %x re-encodes as %x", p, encodeDone(n, b))
				}
			case frameMissing:
				decodeDigest(p)
			}
		}
	})
}
