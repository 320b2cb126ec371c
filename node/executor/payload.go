package executor

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpumesh/gpumesh/internal/text"
)

// ErrPayloadTooLarge is returned when a payload archive or what it unpacks to
// exceeds its limit.
var ErrPayloadTooLarge = errors.New("payload too large")

// unpackTar unpacks a tar archive, optionally gzip-compressed, into dir. It
// reads at most maxRead bytes of the archive and writes at most maxWrite bytes
// of files. Only regular files and directories are accepted: links, devices
// and names that leave dir are refused. Files written before a refusal stay:
// the attempt fails to start and its directory goes with it.
func unpackTar(r io.Reader, dir string, maxRead, maxWrite int64) error {
	limited := &limitReader{r: r, left: maxRead}
	br := bufio.NewReader(limited)
	var src io.Reader = br
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return fmt.Errorf("gzip: %w", err)
		}
		defer gz.Close()
		src = gz
	}
	tr := tar.NewReader(src)
	written := int64(0)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			if limited.exceeded {
				return fmt.Errorf("%w: archive over %s", ErrPayloadTooLarge, text.Bytes(maxRead))
			}
			return fmt.Errorf("tar: %w", err)
		}
		name, err := safeName(h.Name)
		if err != nil {
			return err
		}
		if name == "" {
			continue // the archive's root "./"
		}
		target := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o700); err != nil {
				return err
			}
		case tar.TypeReg:
			if h.Size < 0 || written+h.Size > maxWrite {
				return fmt.Errorf("%w: unpacks to over %s", ErrPayloadTooLarge, text.Bytes(maxWrite))
			}
			if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
				return err
			}
			mode := os.FileMode(0o600)
			if h.Mode&0o100 != 0 {
				mode = 0o700
			}
			f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|os.O_EXCL, mode)
			if err != nil {
				return fmt.Errorf("%s: %w", h.Name, err)
			}
			n, err := io.Copy(f, io.LimitReader(tr, h.Size))
			f.Close()
			written += n
			if err != nil {
				if limited.exceeded {
					return fmt.Errorf("%w: archive over %s", ErrPayloadTooLarge, text.Bytes(maxRead))
				}
				return fmt.Errorf("%s: %w", h.Name, err)
			}
		default:
			return fmt.Errorf("%s: only regular files and directories are allowed in a payload (type %q)", h.Name, string(h.Typeflag))
		}
	}
}

// safeName cleans an archive entry name and refuses one that would leave the
// target directory.
func safeName(name string) (string, error) {
	if strings.Contains(name, "\x00") || strings.Contains(name, `\`) {
		return "", fmt.Errorf("%q: bad character in archive name", name)
	}
	clean := filepath.Clean("/" + name)[1:]
	if filepath.IsAbs(name) || strings.HasPrefix(name, "../") || name == ".." || strings.Contains(name, "/../") || strings.HasSuffix(name, "/..") {
		return "", fmt.Errorf("%q: archive names must stay inside the work dir", name)
	}
	return clean, nil
}

type limitReader struct {
	r        io.Reader
	left     int64
	exceeded bool
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.left <= 0 {
		// One more byte tells "exactly at the limit" from "over it".
		var one [1]byte
		if n, _ := l.r.Read(one[:]); n > 0 {
			l.exceeded = true
			return 0, ErrPayloadTooLarge
		}
		return 0, io.EOF
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}
