package client

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Errors of WriteTarGz, wrapped with the path they concern.
var (
	// ErrPayloadLink: a symbolic link that leaves the directory, is broken,
	// or points at a directory (links are not followed into directories).
	ErrPayloadLink = errors.New("symbolic link not packable")
	// ErrPayloadFileType: something that is neither a regular file, a
	// directory nor a link (a device, socket or pipe), or a name the node
	// refuses.
	ErrPayloadFileType = errors.New("not packable")
)

// WriteTarGz writes the tree under dir to w as a gzip-compressed tar
// archive, without holding it in memory: regular files and directories
// with their permission bits only, in lexical order with zero times and
// owners (the same tree always gives the same bytes). A symbolic link to
// a regular file inside dir is written as a copy of that file; a link that
// leaves dir, is broken or points at a directory is refused
// (ErrPayloadLink), as is anything else that is not a regular file or
// directory (ErrPayloadFileType). The node streams checkpoints to their
// owners in this form.
func WriteTarGz(w io.Writer, dir string) error {
	root, err := filepath.Abs(dir)
	if err == nil {
		root, err = filepath.EvalSymlinks(root)
	}
	if err != nil {
		return fmt.Errorf("payload %s: %w", dir, err)
	}
	if fi, err := os.Stat(root); err != nil {
		return fmt.Errorf("payload %s: %w", dir, err)
	} else if !fi.IsDir() {
		return fmt.Errorf("payload %s: not a directory", dir)
	}
	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	walkErr := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path == root {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		if strings.ContainsAny(name, "\\\x00") {
			return fmt.Errorf("%w: %s: a backslash in a name (the node refuses it)", ErrPayloadFileType, rel)
		}
		src := path
		if d.Type()&fs.ModeSymlink != 0 {
			if src, err = followLink(root, path, rel); err != nil {
				return err
			}
		}
		fi, err := os.Stat(src)
		if err != nil {
			return err
		}
		switch {
		case fi.IsDir():
			return tw.WriteHeader(header(name+"/", tar.TypeDir, fi.Mode(), 0))
		case fi.Mode().IsRegular():
			return packFile(tw, name, rel, src, fi)
		default:
			return fmt.Errorf("%w: %s is a %s; a payload holds regular files and directories", ErrPayloadFileType, rel, fileType(fi.Mode()))
		}
	})
	if walkErr == nil {
		walkErr = tw.Close()
	}
	if walkErr == nil {
		walkErr = gz.Close()
	}
	if walkErr != nil {
		return fmt.Errorf("payload %s: %w", dir, walkErr)
	}
	return nil
}

// followLink resolves the link at path and returns its target when that is
// inside root.
func followLink(root, path, rel string) (string, error) {
	target, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", fmt.Errorf("%w: %s is broken: %v", ErrPayloadLink, rel, err)
	}
	inside, err := filepath.Rel(root, target)
	if err != nil || inside == ".." || strings.HasPrefix(inside, ".."+string(filepath.Separator)) || filepath.IsAbs(inside) {
		return "", fmt.Errorf("%w: %s points outside the payload directory (to %s)", ErrPayloadLink, rel, target)
	}
	fi, err := os.Stat(target)
	if err != nil {
		return "", err
	}
	if fi.IsDir() {
		return "", fmt.Errorf("%w: %s points at a directory; links are not followed into directories", ErrPayloadLink, rel)
	}
	return target, nil
}

func packFile(tw *tar.Writer, name, rel, src string, fi fs.FileInfo) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := tw.WriteHeader(header(name, tar.TypeReg, fi.Mode(), fi.Size())); err != nil {
		return err
	}
	n, err := io.CopyN(tw, f, fi.Size())
	if err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%s shrank while being packed (%d of %d bytes)", rel, n, fi.Size())
		}
		return fmt.Errorf("%s: %w", rel, err)
	}
	return nil
}

func header(name string, typ byte, mode fs.FileMode, size int64) *tar.Header {
	return &tar.Header{
		Typeflag: typ,
		Name:     name,
		Mode:     int64(mode.Perm()),
		Size:     size,
		ModTime:  time.Unix(0, 0),
		Format:   tar.FormatPAX,
	}
}

func fileType(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "special file"
}
