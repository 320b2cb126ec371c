package blob

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
)

// A Manifest describes a tree: its directories, regular files and
// symbolic links, each under a path relative to the tree's root, and for
// each file the ordered list of chunks its bytes are made of. A manifest is
// itself stored, under the digest of its canonical encoding (Encode), so a
// manifest digest names a whole tree and nobody can swap a byte of it.
//
// The canonical encoding is JSON with the fields in the order below, no
// white space, entries sorted by path (byte order) and each path once:
//
//	{"version":1,"entries":[
//	  {"path":"data","type":"dir","mode":493},
//	  {"path":"data/w.bin","type":"file","mode":420,"size":1500000,
//	   "chunks":[{"digest":"sha256:…","size":1048576},{"digest":"sha256:…","size":451424}]},
//	  {"path":"latest","type":"symlink","target":"data/w.bin"}]}
//
// (shown wrapped). Modes are permission bits only (0 to 0777: no setuid,
// setgid or sticky bit); symbolic links have none. Times, owners and
// extended attributes are not recorded: a manifest names content, and the
// same bytes under the same names get the same digest wherever and
// whenever they were stored.
type Manifest struct {
	// Version is the format version, ManifestVersion.
	Version int `json:"version"`
	// Entries are the tree's members in path order. The tree's root is not
	// one of them; every other directory is, before anything under it.
	Entries []Entry `json:"entries"`
}

// ManifestVersion is the only manifest format this package reads.
const ManifestVersion = 1

// MaxManifestSize bounds an encoded manifest: 64 MiB holds about 600,000
// chunk references (some 600 GB of files at 1 MiB a chunk) or 400,000
// small files. Larger trees must be stored as several.
const MaxManifestSize = 64 << 20

// EntryType is the kind of a manifest entry.
type EntryType string

// The entry types.
const (
	TypeDir     EntryType = "dir"
	TypeFile    EntryType = "file"
	TypeSymlink EntryType = "symlink"
)

// Entry is one member of a tree.
type Entry struct {
	// Path is slash-separated and relative to the root: no leading or
	// trailing slash, no empty, "." or ".." element, no backslash or NUL,
	// valid UTF-8, at most MaxPathLen bytes.
	Path string    `json:"path"`
	Type EntryType `json:"type"`
	// Mode holds the permission bits of a directory or file (0 to 0777).
	Mode fs.FileMode `json:"mode,omitempty"`
	// Size is a file's length in bytes: the sum of its chunks' sizes.
	Size int64 `json:"size,omitempty"`
	// Target is a symbolic link's target, stored as it was read. Restore
	// creates the link as it is and never follows it.
	Target string `json:"target,omitempty"`
	// Chunks are a file's bytes in order; an empty file has none.
	Chunks []ChunkRef `json:"chunks,omitempty"`
}

// ChunkRef names one chunk of a file.
type ChunkRef struct {
	Digest Digest `json:"digest"`
	// Size is the chunk's length: 1 to MaxChunkSize bytes.
	Size int64 `json:"size"`
}

// Limits on paths (generous for every file system gpumesh runs on).
const (
	MaxPathLen    = 4096 // bytes in an entry's path or a link's target
	maxElementLen = 255  // bytes in one element of a path
)

// emptyTreeEncoding is the canonical encoding of the manifest of an empty
// directory (TestEmptyTreeIsTheEmptyDirectorysManifest holds it to Encode).
const emptyTreeEncoding = `{"version":1,"entries":[]}`

// EmptyTree returns the digest of the manifest of an empty directory.
// Every store holds it without storing it: Stat, Reader and Manifest
// answer for it whether or not it was ever put, and PutUnder of an empty
// directory writes nothing and makes no lease (a lease on nothing would
// keep nothing, and cost a transaction).
func EmptyTree() Digest { return Sum([]byte(emptyTreeEncoding)) }

// Encode checks m and returns its canonical encoding.
func (m *Manifest) Encode() ([]byte, error) {
	if err := m.validate(); err != nil {
		return nil, err
	}
	return m.marshal()
}

// Digest returns the digest of m's canonical encoding: the name m is
// stored under.
func (m *Manifest) Digest() (Digest, error) {
	b, err := m.Encode()
	if err != nil {
		return Digest{}, err
	}
	return Sum(b), nil
}

func (m *Manifest) marshal() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // "&" stays "&": one spelling, and readable
	if err := enc.Encode(m); err != nil {
		return nil, fmt.Errorf("blob: encoding manifest: %w", err)
	}
	b := buf.Bytes()
	b = b[:len(b)-1] // the Encoder's newline
	if len(b) > MaxManifestSize {
		return nil, &ManifestError{Entry: -1, Reason: fmt.Sprintf("encodes to %d bytes, over the limit of %d", len(b), MaxManifestSize)}
	}
	return b, nil
}

// Size returns the total length of m's files.
func (m *Manifest) Size() int64 {
	var n int64
	for _, e := range m.Entries {
		n += e.Size
	}
	return n
}

// Chunks returns the chunks m's files are made of, each once, in the order
// they first appear.
func (m *Manifest) Chunks() []ChunkRef {
	seen := make(map[Digest]struct{})
	var out []ChunkRef
	for _, e := range m.Entries {
		for _, c := range e.Chunks {
			if _, ok := seen[c.Digest]; ok {
				continue
			}
			seen[c.Digest] = struct{}{}
			out = append(out, c)
		}
	}
	return out
}
