package blob

import "sync"

// reuse keeps what cutting and storing chunks allocates, for the next Put
// to take up: chunk buffers of MaxChunkSize and splitters (the chunker's
// read buffer). Without it every Put allocated and zeroed some 34 MB,
// however small its tree: a node keeping the outputs of many short jobs
// spent more on that than on anything else it does for them. The pools
// hold nothing the collector cannot take back.
type reuse struct {
	bufs      sync.Pool // *[]byte of capacity MaxChunkSize
	splitters sync.Pool // *splitter
}

// buffer returns an empty buffer of capacity MaxChunkSize.
func (r *reuse) buffer() []byte {
	if b, ok := r.bufs.Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return make([]byte, 0, MaxChunkSize)
}

// putBuffer keeps b for a later buffer call when it is one of theirs.
func (r *reuse) putBuffer(b []byte) {
	if cap(b) == MaxChunkSize {
		b = b[:0]
		r.bufs.Put(&b)
	}
}

// splitter returns a splitter not in use.
func (r *reuse) splitter() *splitter {
	if s, ok := r.splitters.Get().(*splitter); ok {
		return s
	}
	return newSplitter()
}

// putSplitter keeps s for a later splitter call; s must not be used
// after.
func (r *reuse) putSplitter(s *splitter) {
	s.reset(nil)
	r.splitters.Put(s)
}
