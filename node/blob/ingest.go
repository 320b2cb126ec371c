package blob

import (
	"sync"
)

// ingest stores the chunks of one Put on a few goroutines of its own, so
// that cutting the next chunk, hashing and writing this one, and waiting
// for the disk to sync the ones before all overlap. It holds at most
// ingestBuffers chunks (each in a buffer of up to MaxChunkSize, touched
// only as far as the chunk reaches: some MiB in all).
type ingest struct {
	s     *Store
	hold  *hold
	reuse *reuse
	slots chan struct{} // one per chunk handed out and not yet stored
	jobs  chan ingestJob
	wg    sync.WaitGroup

	mu        sync.Mutex
	err       error
	newChunks int
	newBytes  int64
	// seen are the digests of the chunks this Put has handed to a
	// goroutine: a chunk that repeats within the tree (a copied file) is
	// stored, and counted new, once, not by two goroutines at once.
	seen map[Digest]bool
}

// The ingest's goroutines, and its buffers: one more than the goroutines,
// for the splitter to fill while they store.
const (
	ingestWorkers = 4
	ingestBuffers = ingestWorkers + 1
)

// ingestJob is one chunk to store; its digest goes into ref.
type ingestJob struct {
	data []byte
	ref  *ChunkRef
}

// newIngest starts an ingest that stores into s, holding what it stores
// in h and taking its buffers from r; with a nil s it only hashes (Scan),
// counting each distinct chunk as new.
func newIngest(s *Store, h *hold, r *reuse) *ingest {
	in := &ingest{s: s, hold: h, reuse: r, slots: make(chan struct{}, ingestBuffers), jobs: make(chan ingestJob), seen: map[Digest]bool{}}
	for range ingestWorkers {
		in.wg.Go(in.work)
	}
	return in
}

// buffer returns an empty buffer of capacity MaxChunkSize, waiting while
// ingestBuffers chunks are out.
func (in *ingest) buffer() []byte {
	in.slots <- struct{}{}
	return in.reuse.buffer()
}

// take waits, as buffer does, for a chunk the caller holds in a buffer of
// its own.
func (in *ingest) take() { in.slots <- struct{}{} }

// store hands a chunk (in a buffer from buffer, or one of the caller's
// after take) to the goroutines; its digest is in ref once wait returned.
func (in *ingest) store(data []byte, ref *ChunkRef) { in.jobs <- ingestJob{data, ref} }

// recycle gives back a buffer that was not handed over.
func (in *ingest) recycle(b []byte) {
	in.reuse.putBuffer(b)
	<-in.slots
}

func (in *ingest) work() {
	for j := range in.jobs {
		in.do(j)
		in.reuse.putBuffer(j.data)
		<-in.slots
	}
}

func (in *ingest) do(j ingestJob) {
	if in.failed() != nil {
		return
	}
	d := Sum(j.data)
	*j.ref = ChunkRef{Digest: d, Size: int64(len(j.data))}
	in.mu.Lock()
	repeat := in.seen[d]
	in.seen[d] = true
	in.mu.Unlock()
	if repeat {
		return // another goroutine of this Put stores it (and holds it)
	}
	if in.s == nil { // Scan: hashing is all
		in.mu.Lock()
		in.newChunks++
		in.newBytes += int64(len(j.data))
		in.mu.Unlock()
		return
	}
	fresh, err := in.s.put(KindChunk, d, j.data, in.hold)
	in.mu.Lock()
	defer in.mu.Unlock()
	if err != nil {
		if in.err == nil {
			in.err = err
		}
		return
	}
	if fresh {
		in.newChunks++
		in.newBytes += int64(len(j.data))
	}
	if in.s.afterChunk != nil {
		in.s.afterChunk()
	}
}

// failed returns the first error of a chunk's store.
func (in *ingest) failed() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.err
}

// wait stores what was handed over, stops the goroutines and returns the
// first error.
func (in *ingest) wait() error {
	close(in.jobs)
	in.wg.Wait()
	return in.failed()
}
