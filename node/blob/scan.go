package blob

import (
	"context"
	"fmt"
	"log/slog"
)

// Scan computes the manifest of the tree under dir without a store: what
// Put would store, byte for byte, and so the same digest. An owner's
// machine scans a payload directory with it, then sends a node the
// manifest and only the chunks the node lacks, each read again from its
// file at the offset the manifest gives (see ChunkOffsets).
//
// It reads the tree as Put does (through an os.Root, links stored as
// links and never followed, sockets, devices and pipes left out and
// listed in PutStats.Skipped), hashing on a few goroutines of its own,
// ended before it returns. PutStats.Manifest is the manifest's digest;
// NewChunks and NewBytes count the distinct chunks. log gets what is left
// out (nil: discard).
func Scan(ctx context.Context, dir string, log *slog.Logger) (*Manifest, PutStats, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, st, err := walkTree(ctx, dir, ".", newIngest(nil, nil, new(reuse)), log)
	if err != nil {
		return nil, st, fmt.Errorf("blob: scan %s: %w", dir, err)
	}
	d, err := m.Digest()
	if err != nil {
		return nil, st, fmt.Errorf("blob: scan %s: %w", dir, err)
	}
	st.Manifest = d
	return m, st, nil
}

// ChunkOffsets returns where each of a file entry's chunks starts in the
// file: the sum of the sizes before it.
func ChunkOffsets(e Entry) []int64 {
	out := make([]int64, len(e.Chunks))
	var off int64
	for i, c := range e.Chunks {
		out[i] = off
		off += c.Size
	}
	return out
}
