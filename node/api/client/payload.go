package client

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/internal/text"
	"github.com/gpumesh/gpumesh/market"
)

// Errors of PackDir, wrapped with the path they concern.
var (
	// ErrPayloadTooLarge: the packed archive would exceed the size cap.
	ErrPayloadTooLarge = errors.New("payload too large")
	// ErrPayloadLink: a symbolic link that leaves the directory, is broken,
	// or points at a directory (links are not followed into directories).
	ErrPayloadLink = errors.New("symbolic link not packable")
	// ErrPayloadFileType: something that is neither a regular file, a
	// directory nor a link (a device, socket or pipe), or a name the node
	// refuses.
	ErrPayloadFileType = errors.New("not packable")
)

// PackDir packs the directory dir into a gzip-compressed tar archive, the
// payload format the node's executor unpacks into a job's work directory.
//
// It takes regular files and directories, keeping only their permission
// bits. A symbolic link to a regular file inside dir is packed as a copy of
// that file; a link that leaves dir, is broken or points at a directory is
// refused (ErrPayloadLink), as is anything else that is not a regular file or
// directory (ErrPayloadFileType). Entries are in lexical order with zero
// times and owners, so the same tree always packs to the same bytes (and the
// same digest). An archive over max bytes is refused with ErrPayloadTooLarge
// (max ≤ 0 means market.MaxPayloadBytes).
func PackDir(dir string, max int64) ([]byte, error) {
	if max <= 0 {
		max = market.MaxPayloadBytes
	}
	var buf bytes.Buffer
	cw := &capWriter{w: &buf, left: max}
	if err := WriteTarGz(cw, dir); err != nil {
		if cw.over || errors.Is(err, ErrPayloadTooLarge) {
			return nil, fmt.Errorf("payload %s: %w: it packs to over %s (the most a job may carry)", dir, ErrPayloadTooLarge, text.Bytes(max))
		}
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteTarGz writes the tree under dir to w as a gzip-compressed tar
// archive, as PackDir packs it, without a size limit and without holding
// it in memory.
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

// capWriter fails once more than left bytes are written.
type capWriter struct {
	w    io.Writer
	left int64
	over bool
}

func (c *capWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > c.left {
		c.over = true
		return 0, ErrPayloadTooLarge
	}
	c.left -= int64(len(p))
	return c.w.Write(p)
}

// PayloadDigest returns the digest a PayloadRef carries for archive:
// "sha256:" and 64 lower-case hex digits.
func PayloadDigest(archive []byte) string {
	sum := sha256.Sum256(archive)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// PutPayload uploads a payload archive (POST /v1/payloads) and returns the
// reference to put in a spec's Payload. It checks that the node stored what
// was sent: the reference's size and digest must be the archive's. The
// upload has no timeout of its own (a 64 MiB archive over a slow link takes a
// while): ctx bounds it.
func (c *Client) PutPayload(ctx context.Context, archive []byte) (market.PayloadRef, error) {
	if len(archive) == 0 {
		return market.PayloadRef{}, errors.New("payload: empty archive")
	}
	if len(archive) > market.MaxPayloadBytes {
		return market.PayloadRef{}, fmt.Errorf("payload: %w: %s, the most is %s", ErrPayloadTooLarge, text.Bytes(int64(len(archive))), text.Bytes(market.MaxPayloadBytes))
	}
	var ref market.PayloadRef
	err := c.call(ctx, request{method: http.MethodPost, path: "/v1/payloads", body: archive, contentType: "application/gzip", stream: true, unsigned: true}, &ref)
	if err != nil {
		return market.PayloadRef{}, err
	}
	if want := PayloadDigest(archive); ref.Digest != want || ref.Size != int64(len(archive)) {
		return market.PayloadRef{}, fmt.Errorf("payload: the node stored %s (%d bytes), but %s (%d bytes) was sent", ref.Digest, ref.Size, want, len(archive))
	}
	return ref, nil
}
