package blob

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// ErrBadManifest is what every *ManifestError matches with errors.Is.
var ErrBadManifest = errors.New("blob: malformed manifest")

// ManifestError says what is wrong with a manifest and where.
type ManifestError struct {
	// Entry is the index of the offending entry, or -1 when the fault is
	// not one entry's.
	Entry int
	// Path is the offending entry's path, when it has one.
	Path string
	// Reason says what is wrong.
	Reason string
}

func (e *ManifestError) Error() string {
	if e.Entry < 0 {
		return fmt.Sprintf("blob: malformed manifest: %s", e.Reason)
	}
	return fmt.Sprintf("blob: malformed manifest: entry %d (%q): %s", e.Entry, clip(e.Path), e.Reason)
}

// Is makes errors.Is(err, ErrBadManifest) true.
func (e *ManifestError) Is(target error) bool { return target == ErrBadManifest }

// DecodeManifest reads a manifest in canonical encoding. It refuses
// anything else with a *ManifestError naming the fault: bytes that are
// not JSON or not the canonical spelling of what they hold (white space,
// field order or case, escapes, duplicate or unknown fields, trailing
// data), an unknown version, a bad path, entries out of order or twice, an
// entry under something that is not a directory of the manifest, mode bits
// outside 0777, a file whose chunks do not add up to its size, a chunk
// over MaxChunkSize, one digest with two sizes, a link without target.
func DecodeManifest(b []byte) (*Manifest, error) {
	if len(b) > MaxManifestSize {
		return nil, &ManifestError{Entry: -1, Reason: fmt.Sprintf("%d bytes, over the limit of %d", len(b), MaxManifestSize)}
	}
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, &ManifestError{Entry: -1, Reason: "not a manifest: " + err.Error()}
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, &ManifestError{Entry: -1, Reason: "trailing data after the manifest"}
	}
	if err := m.validate(); err != nil {
		return nil, err
	}
	canon, err := m.marshal()
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(canon, b) {
		i := 0
		for i < len(canon) && i < len(b) && canon[i] == b[i] {
			i++
		}
		return nil, &ManifestError{Entry: -1, Reason: fmt.Sprintf("not in canonical form: byte %d is %s, canonical is %s", i, byteAt(b, i), byteAt(canon, i))}
	}
	return &m, nil
}

func byteAt(b []byte, i int) string {
	if i >= len(b) {
		return "the end"
	}
	return fmt.Sprintf("%q", b[i])
}

// validate checks everything but the spelling.
func (m *Manifest) validate() error {
	if m.Version != ManifestVersion {
		return &ManifestError{Entry: -1, Reason: fmt.Sprintf("version %d, this gpumesh reads %d", m.Version, ManifestVersion)}
	}
	if m.Entries == nil {
		return &ManifestError{Entry: -1, Reason: "no entries list (an empty tree has an empty one)"}
	}
	dirs := make(map[string]struct{})
	sizes := make(map[Digest]int64)
	var total int64
	for i, e := range m.Entries {
		bad := func(format string, args ...any) error {
			return &ManifestError{Entry: i, Path: e.Path, Reason: fmt.Sprintf(format, args...)}
		}
		if err := checkPath(e.Path); err != nil {
			return bad("path %v", err)
		}
		if i > 0 && e.Path <= m.Entries[i-1].Path {
			return bad("comes after %q: entries are sorted by path, each once", clip(m.Entries[i-1].Path))
		}
		if parent, _, nested := cutLast(e.Path); nested {
			if _, ok := dirs[parent]; !ok {
				return bad("its parent %q is not a directory of the manifest", clip(parent))
			}
		}
		switch e.Type {
		case TypeDir, TypeFile:
			if e.Mode&^0o777 != 0 {
				return bad("mode %#o has bits outside 0777", uint32(e.Mode))
			}
			if e.Target != "" {
				return bad("a %s has no target", e.Type)
			}
		case TypeSymlink:
			if e.Mode != 0 {
				return bad("a symlink has no mode")
			}
			if err := checkTarget(e.Target); err != nil {
				return bad("target %v", err)
			}
		default:
			return bad("type %q: want dir, file or symlink", clip(string(e.Type)))
		}
		if e.Type != TypeFile {
			if e.Size != 0 || e.Chunks != nil {
				return bad("a %s has no size and no chunks", e.Type)
			}
			if e.Type == TypeDir {
				dirs[e.Path] = struct{}{}
			}
			continue
		}
		if e.Size < 0 {
			return bad("size %d", e.Size)
		}
		if e.Size == 0 && e.Chunks != nil {
			return bad("an empty file has no chunks list")
		}
		var sum int64
		for j, c := range e.Chunks {
			if c.Digest.IsZero() {
				return bad("chunk %d has the zero digest", j)
			}
			if c.Size < 1 || c.Size > MaxChunkSize {
				return bad("chunk %d is %d bytes: want 1 to %d", j, c.Size, MaxChunkSize)
			}
			if prev, ok := sizes[c.Digest]; ok && prev != c.Size {
				return bad("chunk %d %s is %d bytes here and %d bytes elsewhere", j, c.Digest.Short(), c.Size, prev)
			}
			sizes[c.Digest] = c.Size
			sum += c.Size // at most len(b)/80 chunks of 8 MiB: no overflow
		}
		if sum != e.Size {
			return bad("chunks add up to %d bytes, size is %d", sum, e.Size)
		}
		if total += e.Size; total < 0 {
			return bad("the files add up to more than an int64")
		}
	}
	return nil
}

// cutLast splits a path at its last slash.
func cutLast(p string) (dir, name string, nested bool) {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return "", p, false
	}
	return p[:i], p[i+1:], true
}

// checkPath checks an entry's path: see Entry.Path.
func checkPath(p string) error {
	switch {
	case p == "":
		return errors.New("is empty")
	case len(p) > MaxPathLen:
		return fmt.Errorf("is %d bytes, over %d", len(p), MaxPathLen)
	case !utf8.ValidString(p):
		return errors.New("is not valid UTF-8")
	case p[0] == '/':
		return errors.New("is absolute")
	}
	for el := range strings.SplitSeq(p, "/") {
		switch {
		case el == "":
			return errors.New("has an empty element (a leading, trailing or double slash)")
		case el == "." || el == "..":
			return fmt.Errorf("has a %q element", el)
		case len(el) > maxElementLen:
			return fmt.Errorf("has an element of %d bytes, over %d", len(el), maxElementLen)
		}
	}
	for _, r := range p {
		switch {
		case r == '\\':
			return errors.New("holds a backslash")
		case r < 0x20 || r == 0x7f:
			return fmt.Errorf("holds the control character %U", r)
		}
	}
	return nil
}

// checkTarget checks a symlink's target: any path but an empty one, one
// with NUL, or one over MaxPathLen.
func checkTarget(t string) error {
	switch {
	case t == "":
		return errors.New("is empty")
	case len(t) > MaxPathLen:
		return fmt.Errorf("is %d bytes, over %d", len(t), MaxPathLen)
	case !utf8.ValidString(t):
		return errors.New("is not valid UTF-8")
	case strings.IndexByte(t, 0) >= 0:
		return errors.New("holds a NUL byte")
	}
	return nil
}
