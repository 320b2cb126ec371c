package transfer

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/blob"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// rawHolder is a peer that answers requests with frames a test writes.
// The channel it returns is closed at its first request.
func rawHolder(t *testing.T, tn *testNet, answer func(q request, w *bufio.Writer, done <-chan struct{})) (peer.ID, <-chan struct{}) {
	t.Helper()
	h, err := tn.mn.GenPeer()
	if err != nil {
		t.Fatal(err)
	}
	if err := tn.mn.LinkAll(); err != nil {
		t.Fatal(err)
	}
	seen := make(chan struct{})
	var once sync.Once
	done := make(chan struct{})
	t.Cleanup(func() { close(done); h.Close() })
	h.SetStreamHandler(testProto, func(st network.Stream) {
		defer st.Close()
		r := bufio.NewReader(st)
		typ, p, err := readFrame(r, nil)
		if err != nil {
			st.Reset()
			return
		}
		q, err := decodeRequest(typ, p)
		if err != nil {
			st.Reset()
			return
		}
		once.Do(func() { close(seen) })
		w := bufio.NewWriter(st)
		answer(q, w, done)
		w.Flush()
	})
	return h.ID(), seen
}

// withManifest gives a the manifest b holds (not its chunks).
func withManifest(t *testing.T, a, b *testNode, m blob.Digest) *blob.Manifest {
	t.Helper()
	man, err := b.store.Manifest(m)
	if err != nil {
		t.Fatal(err)
	}
	enc, _ := man.Encode()
	w, err := a.store.Writer(blob.KindManifest, m, int64(len(enc)))
	if err != nil {
		t.Fatal(err)
	}
	w.Write(enc)
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	return man
}

func TestFetchDropsAMisbehavingHolder(t *testing.T) {
	object := func(w *bufio.Writer, kind blob.Kind, d blob.Digest, size int64) {
		writeFrame(w, frameObject, objectHeader{kind: kind, digest: d, size: size}.encode())
	}
	for _, tc := range []struct {
		name   string
		answer func(q request, w *bufio.Writer, done <-chan struct{})
		want   error
	}{
		{"chunk over the limit", func(q request, w *bufio.Writer, _ <-chan struct{}) {
			object(w, blob.KindChunk, q.digests[0], blob.MaxChunkSize+1)
		}, ErrMalformed},
		{"another chunk", func(q request, w *bufio.Writer, _ <-chan struct{}) {
			object(w, blob.KindChunk, blob.Sum([]byte("other")), 10)
		}, ErrMalformed},
		{"data past the object", func(q request, w *bufio.Writer, _ <-chan struct{}) {
			object(w, blob.KindChunk, q.digests[0], 1) // the manifest says more
		}, ErrMalformed},
		{"data frame over the limit", func(q request, w *bufio.Writer, _ <-chan struct{}) {
			writeFrame(w, frameData, make([]byte, MaxData+1))
		}, ErrMalformed},
		{"unknown frame", func(q request, w *bufio.Writer, _ <-chan struct{}) {
			w.Write([]byte{'Z', 0})
		}, ErrMalformed},
		{"missing another", func(q request, w *bufio.Writer, _ <-chan struct{}) {
			d := blob.Sum([]byte("other"))
			writeFrame(w, frameMissing, d[:])
		}, ErrMalformed},
		{"cut short", func(q request, w *bufio.Writer, _ <-chan struct{}) {
			object(w, blob.KindChunk, q.digests[0], 5)
			writeFrame(w, frameData, []byte("ab"))
		}, nil},
		{"stalled", func(q request, w *bufio.Writer, done <-chan struct{}) {
			<-done
		}, os.ErrDeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The Timeout drops the stalled holder; it is long enough
			// for the good one to answer on a loaded machine.
			tn := newTestNet(t)
			a := tn.addNode(blob.NoLimit, func(c *Config) { c.Timeout = 3 * time.Second; c.Batch = 1 })
			b := tn.addNode(blob.NoLimit, nil)
			src := tree(t, 30, 3*mib)
			m := putTree(t, b, src).Manifest
			withManifest(t, a, b, m)
			bad, seen := rawHolder(t, tn, tc.answer)
			// b answers once the bad holder has had a request.
			b.auth.set(func(x *testAuth) {
				x.onRead = func(ctx context.Context, _ int) {
					select {
					case <-seen:
					case <-ctx.Done():
					}
				}
			})
			st, err := a.svc.Fetch(testCtx(t), m, []peer.ID{bad, b.id()}, lease(t, a, "f"))
			if err != nil {
				t.Fatal(err)
			}
			hb := st.Holders[bad]
			if hb.Err == nil || hb.Chunks != 0 || (tc.want != nil && !errors.Is(hb.Err, tc.want)) {
				t.Fatalf("the bad holder: %+v, want it dropped for %v", hb, tc.want)
			}
			sameFiles(t, a, m, src)
		})
	}
}

func TestServeRefusesMalformedRequests(t *testing.T) {
	tn := newTestNet(t)
	a, b := tn.addNode(blob.NoLimit, nil), tn.addNode(blob.NoLimit, nil)
	m := putTree(t, b, tree(t, 40, 100)).Manifest
	for _, tc := range []struct {
		name string
		q    request
		code Code
	}{
		{"a chunk of no manifest of it", request{typ: frameGet, scope: m, digests: []blob.Digest{blob.Sum([]byte("x"))}}, CodeBadRequest},
		{"a push naming chunks", request{typ: framePush, scope: m, digests: []blob.Digest{m}}, CodeBadRequest},
		{"a get of nothing", request{typ: frameGet, scope: m}, CodeBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := a.svc.send(testCtx(t), b.id(), tc.q)
			if err != nil {
				t.Fatal(err)
			}
			defer c.reset()
			typ, p, err := readFrame(c.r, nil)
			if err != nil || typ != frameError {
				t.Fatalf("answer %q, %v; want ERROR", typ, err)
			}
			code, msg, err := decodeError(p)
			if err != nil || code != tc.code {
				t.Fatalf("ERROR %v %q (%v), want %v", code, msg, err, tc.code)
			}
		})
	}
}

func TestGetOfWhatAHolderLacks(t *testing.T) {
	tn := newTestNet(t)
	a := tn.addNode(blob.NoLimit, func(c *Config) { c.Batch, c.HolderStreams = 1, 1 })
	b := tn.addNode(blob.NoLimit, nil)
	src := tree(t, 50, 2*mib)
	m := putTree(t, b, src).Manifest
	withManifest(t, a, b, m)
	// A fetch from a holder of the manifest alone ends incomplete.
	c := tn.addNode(blob.NoLimit, nil)
	withManifest(t, c, b, m)
	_, err := a.svc.Fetch(testCtx(t), m, []peer.ID{c.id()}, lease(t, a, "f"))
	var ie *IncompleteError
	if !errors.As(err, &ie) || ie.Chunks == 0 || len(ie.Holders) != 0 {
		t.Fatalf("Fetch from a holder without chunks = %v, want an *IncompleteError with no holder at fault", err)
	}
	// b answers once c had a request, so c surely gets some.
	cSeen := make(chan struct{})
	var once sync.Once
	c.auth.set(func(x *testAuth) { x.onRead = func(context.Context, int) { once.Do(func() { close(cSeen) }) } })
	b.auth.set(func(x *testAuth) {
		x.onRead = func(ctx context.Context, _ int) {
			select {
			case <-cSeen:
			case <-ctx.Done():
			}
		}
	})
	st, err := a.svc.Fetch(testCtx(t), m, []peer.ID{c.id(), b.id()}, "f")
	if err != nil || st.Holders[c.id()].Missing == 0 || st.Holders[b.id()].Chunks != st.Chunks {
		t.Fatalf("Fetch = %+v, %v; want c's misses counted and b serving all", st, err)
	}
}

func TestCloseEndsAFetchInFlight(t *testing.T) {
	tn := newTestNet(t)
	a := tn.addNode(blob.NoLimit, func(c *Config) { c.Timeout = time.Hour })
	b := tn.addNode(blob.NoLimit, nil)
	m := putTree(t, b, tree(t, 60, 2*mib)).Manifest
	withManifest(t, a, b, m)
	bad, seen := rawHolder(t, tn, func(q request, w *bufio.Writer, done <-chan struct{}) { <-done })
	id := lease(t, a, "f")
	errc := make(chan error, 1)
	go func() {
		_, err := a.svc.Fetch(context.Background(), m, []peer.ID{bad}, id)
		errc <- err
	}()
	<-seen
	a.svc.Close()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Fetch ended by Close = %v, want context.Canceled", err)
	}
	if _, err := a.svc.Fetch(context.Background(), m, []peer.ID{b.id()}, "f"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Fetch after Close = %v, want ErrClosed", err)
	}
}

func TestAStreamCarriesRequestsInOrder(t *testing.T) {
	tn := newTestNet(t)
	a, b := tn.addNode(blob.NoLimit, nil), tn.addNode(blob.NoLimit, nil)
	m := putTree(t, b, tree(t, 70, 3*mib)).Manifest
	man, _ := b.store.Manifest(m)
	chunks := man.Chunks()
	if len(chunks) < 2 {
		t.Fatalf("a tree of %d chunks, want several", len(chunks))
	}
	c, err := a.svc.dial(testCtx(t), b.id())
	if err != nil {
		t.Fatal(err)
	}
	defer c.reset()
	// Both requests go out before either is answered.
	for _, ref := range chunks[:2] {
		if err := c.request(request{typ: frameGet, scope: m, digests: []blob.Digest{ref.Digest}}); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, MaxData)
	for _, ref := range chunks[:2] {
		typ, p, err := readFrame(c.r, buf)
		if err != nil || typ != frameObject {
			t.Fatalf("answer %q, %v; want OBJECT", typ, err)
		}
		o, err := decodeObject(p)
		if err != nil || o.digest != ref.Digest {
			t.Fatalf("OBJECT %v (%v), want chunk %s", o, err, ref.Digest.Short())
		}
		for left := o.size; left > 0; {
			typ, p, err := readFrame(c.r, buf)
			if err != nil || typ != frameData {
				t.Fatalf("frame %q, %v; want DATA", typ, err)
			}
			left -= int64(len(p))
		}
	}
	// A push is a stream's only request.
	if err := c.request(request{typ: framePush, scope: m}); err != nil {
		t.Fatal(err)
	}
	typ, p, err := readFrame(c.r, nil)
	if err != nil || typ != frameError {
		t.Fatalf("answer to a PUSH after GETs: %q, %v; want ERROR", typ, err)
	}
	if code, _, _ := decodeError(p); code != CodeBadRequest {
		t.Fatalf("ERROR %v, want %v", code, CodeBadRequest)
	}

	// Half-closing a stream ends it cleanly.
	c2, err := a.svc.dial(testCtx(t), b.id())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.reset()
	if err := c2.request(request{typ: frameHas, scope: m, digests: []blob.Digest{m}}); err != nil {
		t.Fatal(err)
	}
	if err := c2.st.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if typ, _, err := readFrame(c2.r, nil); err != nil || typ != frameHave {
		t.Fatalf("answer %q, %v; want HAVE", typ, err)
	}
	if _, _, err := readFrame(c2.r, nil); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last answer: %v, want the end of the stream", err)
	}
}
