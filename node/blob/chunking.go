package blob

import (
	"io"

	"github.com/restic/chunker"
)

// Content-defined chunking. A file is cut where a Rabin fingerprint of the
// last 64 bytes hits a pattern, so an edit moves at most the cuts next to
// it and the rest of the file keeps its chunks (and their digests). Every
// node must cut alike, or two copies of the same bytes would not share
// chunks: the polynomial and the bounds below are part of the store's
// format. Changing any of them changes every digest a tree gets, so it
// needs a new format version (see layoutVersion), never a quiet edit.
const (
	// Polynomial is the irreducible polynomial of degree 53 over GF(2) of
	// the fingerprint. It was drawn once with chunker.RandomPolynomial
	// (restic/chunker v0.4.0) and is fixed from then on; the tests check
	// that it is irreducible and of degree 53.
	Polynomial = chunker.Pol(0x24c810240dc9b1)

	// MinChunkSize is the smallest chunk but a file's last (a file shorter
	// than this is one chunk).
	MinChunkSize = 512 << 10
	// MaxChunkSize is the largest chunk: a cut is forced here when the
	// pattern did not appear. It is also the largest chunk the transfer
	// protocol carries.
	MaxChunkSize = 8 << 20
	// averageBits sets how often the pattern hits: once in 2^19 bytes
	// after the minimum, so chunks average about 512 KiB + 512 KiB = 1 MiB.
	averageBits = 19
)

// splitter cuts readers into chunks; it holds the chunker's tables and
// read buffer, reused from file to file. It is not safe for concurrent
// use.
type splitter struct {
	c *chunker.Chunker
}

func newSplitter() *splitter {
	return &splitter{c: chunker.NewWithBoundaries(nil, Polynomial, MinChunkSize, MaxChunkSize)}
}

// reset starts cutting r.
func (s *splitter) reset(r io.Reader) {
	s.c.ResetWithBoundaries(r, Polynomial, MinChunkSize, MaxChunkSize)
	s.c.SetAverageBits(averageBits) // reset restores the library's default
}

// next returns the next chunk's bytes, in buf when its capacity is
// MaxChunkSize (else in a grown copy), or io.EOF after the last.
func (s *splitter) next(buf []byte) ([]byte, error) {
	c, err := s.c.Next(buf)
	if err != nil {
		return nil, err
	}
	return c.Data, nil
}
