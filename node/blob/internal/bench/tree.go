package bench

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
)

// Tree is a synthetic tree: Files files of FileSize bytes of
// pseudo-random data (so nothing deduplicates by accident), and the edits
// that make its second version.
type Tree struct {
	Files    int
	FileSize int64
	Edits    []Edit
}

// Edit changes one file of the second version: Len new bytes at Off,
// written over the old ones or inserted before them (shifting the rest of
// the file, which content-defined chunking must survive).
type Edit struct {
	File   int
	Off    int64
	Len    int64
	Insert bool
}

// NewTree plans a tree of about size bytes in files of at most 64 MiB (at
// least 4 files), whose second version has changed (0 to 1) of its bytes
// changed in regions of region bytes spread over the files; every fifth
// region is an insertion, the others overwrite.
func NewTree(size int64, changed float64, region int64) Tree {
	fileSize := min(int64(64<<20), size/4)
	t := Tree{Files: int(size / fileSize), FileSize: fileSize}
	toChange := int64(changed * float64(size))
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; toChange > 0; i++ {
		n := min(region, toChange)
		toChange -= n
		e := Edit{File: i % t.Files, Len: n, Insert: i%5 == 4}
		// Regions of one file fall in separate slots of it.
		slot := fileSize / (region * 2)
		e.Off = (int64(i/t.Files)%max(slot, 1))*region*2 + rng.Int64N(region)
		e.Off = min(e.Off, fileSize-n)
		t.Edits = append(t.Edits, e)
	}
	return t
}

// Bytes returns the size of a version (1 or 2).
func (t Tree) Bytes(version int) int64 {
	n := int64(t.Files) * t.FileSize
	if version == 2 {
		for _, e := range t.Edits {
			if e.Insert {
				n += e.Len
			}
		}
	}
	return n
}

// Changed returns the bytes the second version changed or added.
func (t Tree) Changed() int64 {
	var n int64
	for _, e := range t.Edits {
		n += e.Len
	}
	return n
}

// Write writes a version (1 or 2) of the tree into dir, streaming: it
// holds no file in memory. Writing version 2 over version 1 rewrites only
// the files with edits.
func (t Tree) Write(dir string, version int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for f := range t.Files {
		var edits []Edit
		if version == 2 {
			for _, e := range t.Edits {
				if e.File == f {
					edits = append(edits, e)
				}
			}
			if len(edits) == 0 {
				continue
			}
		}
		if err := t.writeFile(filepath.Join(dir, fmt.Sprintf("shard-%04d.bin", f)), f, edits); err != nil {
			return err
		}
	}
	return nil
}

func (t Tree) writeFile(path string, f int, edits []Edit) error {
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	base := stream(uint64(f))
	slices.SortFunc(edits, func(a, b Edit) int { return int(a.Off - b.Off) })
	var pos int64
	for i, e := range edits {
		if e.Off < pos {
			continue // overlaps the previous edit: planned away, kept safe
		}
		if _, err := io.CopyN(out, base, e.Off-pos); err != nil {
			out.Close()
			return err
		}
		if _, err := io.CopyN(out, stream(uint64(1_000_000+i)<<8|uint64(f)), e.Len); err != nil {
			out.Close()
			return err
		}
		pos = e.Off
		if !e.Insert {
			io.CopyN(io.Discard, base, e.Len)
			pos += e.Len
		}
	}
	if _, err := io.CopyN(out, base, t.FileSize-pos); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// stream is an endless deterministic pseudo-random byte stream.
func stream(seed uint64) io.Reader {
	var key [32]byte
	for i := range 8 {
		key[i] = byte(seed >> (8 * i))
	}
	return rand.NewChaCha8(key)
}
