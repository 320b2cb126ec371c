package blob

import (
	"archive/tar"
	"fmt"
	"io"
	"time"
)

// WriteTar writes the tree of a stored manifest to w as a tar archive, its
// files read from their chunks (each checked against its digest as it is
// read): for typ TypeDir an entry "./" first (mode 0755), then every entry
// under its path; for typ TypeFile, m's one entry (Subtree of a file).
// Directories and files keep their permission bits, links their target;
// times are zero and owners empty, so a tree always gives the same
// archive. The caller keeps m's chunks from collection meanwhile (a lease)
// and, on an error, discards what was written: the archive is cut short.
func (s *Store) WriteTar(w io.Writer, m *Manifest, typ EntryType) error {
	tw := tar.NewWriter(w)
	switch typ {
	case TypeDir:
		if err := tw.WriteHeader(tarHeader("./", tar.TypeDir, 0o755, 0, "")); err != nil {
			return err
		}
	case TypeFile:
		if len(m.Entries) != 1 || m.Entries[0].Type != TypeFile {
			return fmt.Errorf("blob: a file's tree holds one file, this one %d entries", len(m.Entries))
		}
	default:
		return fmt.Errorf("blob: a tar of a %q", typ)
	}
	for _, e := range m.Entries {
		var err error
		switch e.Type {
		case TypeDir:
			err = tw.WriteHeader(tarHeader(e.Path+"/", tar.TypeDir, int64(e.Mode.Perm()), 0, ""))
		case TypeSymlink:
			err = tw.WriteHeader(tarHeader(e.Path, tar.TypeSymlink, 0o777, 0, e.Target))
		case TypeFile:
			if err = tw.WriteHeader(tarHeader(e.Path, tar.TypeReg, int64(e.Mode.Perm()), e.Size, "")); err != nil {
				break
			}
			r := s.FileReader(e)
			var n int64
			n, err = io.Copy(tw, r)
			r.Close()
			if err == nil && n != e.Size {
				err = fmt.Errorf("blob: %q: %d bytes in its chunks, %d in the manifest", e.Path, n, e.Size)
			}
		}
		if err != nil {
			return fmt.Errorf("blob: tar of %q: %w", e.Path, err)
		}
	}
	return tw.Close()
}

func tarHeader(name string, typ byte, mode, size int64, target string) *tar.Header {
	return &tar.Header{Typeflag: typ, Name: name, Mode: mode, Size: size, Linkname: target, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
}
