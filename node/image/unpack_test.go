//go:build unix

package image_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/gpumesh/gpumesh/node/image"
	"github.com/gpumesh/gpumesh/node/image/imagetest"
)

// An image's layers unpack into one root file system: an upper layer's
// whiteout removes a lower file, an opaque directory hides the lower
// one's contents, links stay links, setuid bits and device nodes are
// dropped; a second attempt shares the same directory.
func TestAcquireUnpacksLayers(t *testing.T) {
	reg := imagetest.New(t)
	img := imageOf(t, v1.Config{Cmd: []string{"/bin/app"}},
		layer(t,
			entry{name: "bin/", typ: tar.TypeDir},
			entry{name: "bin/app", body: "v1", mode: 0o755},
			entry{name: "bin/su", body: "root me", mode: 0o4755},
			entry{name: "etc/old.conf", body: "old"},
			entry{name: "opt/lib/", typ: tar.TypeDir},
			entry{name: "opt/lib/a.so", body: "a"},
			entry{name: "dev/null", typ: tar.TypeChar, devNum: 3},
			entry{name: "tmp/", typ: tar.TypeDir, mode: 0o1777},
		),
		layer(t,
			entry{name: "bin/app", body: "v2", mode: 0o755},
			entry{name: "etc/.wh.old.conf"},
			entry{name: "opt/lib/.wh..wh..opq"},
			entry{name: "opt/lib/b.so", body: "b"},
			entry{name: "usr/bin/python", typ: tar.TypeSymlink, link: "python3"},
			entry{name: "usr/bin/python3", body: "py", mode: 0o755},
			entry{name: "usr/bin/python3.11", typ: tar.TypeLink, link: "usr/bin/python3"},
			entry{name: "etc/alternatives/x", typ: tar.TypeSymlink, link: "/usr/bin/python3"},
		))
	ref := reg.Push(t, "team/app:v1", img)
	c, _ := newCache(t, nil)
	pulled, err := c.Pull(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	root, err := c.Acquire(context.Background(), pulled)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Release()
	dir := root.Dir()
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			return "<" + err.Error() + ">"
		}
		return string(b)
	}
	for p, want := range map[string]string{"bin/app": "v2", "opt/lib/b.so": "b", "usr/bin/python3.11": "py"} {
		if got := read(p); got != want {
			t.Errorf("%s: %q, want %q", p, got, want)
		}
	}
	for _, gone := range []string{"etc/old.conf", "opt/lib/a.so", "dev/null", "etc/.wh.old.conf"} {
		if _, err := os.Lstat(filepath.Join(dir, gone)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s is there (%v)", gone, err)
		}
	}
	if target, err := os.Readlink(filepath.Join(dir, "usr/bin/python")); err != nil || target != "python3" {
		t.Errorf("python link: %q %v", target, err)
	}
	if target, err := os.Readlink(filepath.Join(dir, "etc/alternatives/x")); err != nil || target != "/usr/bin/python3" {
		t.Errorf("an absolute link stays as it is (never followed): %q %v", target, err)
	}
	a, _ := os.Stat(filepath.Join(dir, "usr/bin/python3"))
	b, _ := os.Stat(filepath.Join(dir, "usr/bin/python3.11"))
	if !os.SameFile(a, b) {
		t.Error("the hard link is a copy")
	}
	if fi, err := os.Stat(filepath.Join(dir, "bin/su")); err != nil || fi.Mode()&fs.ModeSetuid != 0 || fi.Mode().Perm() != 0o755 {
		t.Errorf("bin/su: %v %v", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "tmp")); err != nil || fi.Mode()&fs.ModeSticky == 0 || fi.Mode().Perm() != 0o777 {
		t.Errorf("tmp: %v %v", fi.Mode(), err)
	}
	again, err := c.Acquire(context.Background(), pulled)
	if err != nil || again.Dir() != dir {
		t.Fatalf("second acquire: %v %v", again, err)
	}
	again.Release()
	if s := c.Stats(); s.Unpacks != 1 || s.RootfsBytes != int64(len("v2b")+len("root me")+len("py")) {
		t.Errorf("stats %+v", s)
	}
}

// Unpacking as root with a uid shift gives every entry its shifted owner,
// as the container's user namespace maps it.
func TestUnpackShiftsOwners(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("changing owners needs root")
	}
	dir := t.TempDir()
	tarball := tarBytes(t, entry{name: "home/app/", typ: tar.TypeDir, uid: 1000}, entry{name: "home/app/x", body: "x", uid: 1000},
		entry{name: "big", body: "y", uid: 70000}, entry{name: "l", typ: tar.TypeSymlink, link: "x"})
	if _, err := image.Unpack(context.Background(), bytes.NewReader(tarball), dir, image.UnpackOptions{UIDShift: 1 << 24}); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]uint32{"home/app": 1<<24 + 1000, "home/app/x": 1<<24 + 1000, "big": 1<<24 + 65534, "l": 1 << 24} {
		fi, err := os.Lstat(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != want || st.Gid != want {
			t.Errorf("%s owned by %d:%d, want %d", p, st.Uid, st.Gid, want)
		}
	}
}

// A malicious layer is refused with an error naming the entry and why,
// and nothing lands outside the root.
func TestUnpackRefusesMaliciousLayers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []entry
		want    string
	}{
		{"dot-dot path", []entry{{name: "../escaped", body: "x"}}, `"../escaped": unsafe layer entry: the path climbs out`},
		{"dot-dot inside", []entry{{name: "a/../../escaped", body: "x"}}, "climbs out"},
		{"write through an absolute link", []entry{{name: "evil", typ: tar.TypeSymlink, link: "/tmp"}, {name: "evil/escaped", body: "x"}}, `"evil/escaped"`},
		{"write through a relative link", []entry{{name: "d/", typ: tar.TypeDir}, {name: "d/evil", typ: tar.TypeSymlink, link: "../../.."}, {name: "d/evil/escaped", body: "x"}}, `"d/evil/escaped"`},
		{"absolute hard link", []entry{{name: "passwd", typ: tar.TypeLink, link: "/etc/passwd"}}, `a hard link to the absolute path "/etc/passwd"`},
		{"hard link climbing out", []entry{{name: "a/b/passwd", typ: tar.TypeLink, link: "../../../etc/passwd"}}, "outside the image"},
		{"hard link to nothing", []entry{{name: "l", typ: tar.TypeLink, link: "nothing"}}, "does not hold"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent := t.TempDir()
			dir := filepath.Join(parent, "root")
			os.Mkdir(dir, 0o755)
			_, err := image.Unpack(context.Background(), bytes.NewReader(tarBytes(t, tc.entries...)), dir, image.UnpackOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
			if _, err := os.Lstat(filepath.Join(parent, "escaped")); err == nil {
				t.Error("a file was written outside the root")
			}
			if _, err := os.Lstat("/tmp/escaped"); err == nil {
				t.Error("a file was written in /tmp")
			}
		})
	}
}

// Through the cache, a malicious image fails the acquire with the entry
// named, leaves no root file system, and a (sparse) file larger than the
// cache is refused before a byte of it is written.
func TestAcquireRefusesBadImages(t *testing.T) {
	reg := imagetest.New(t)
	evil := reg.Push(t, "team/evil:v1", imageOf(t, v1.Config{Cmd: []string{"x"}},
		layer(t, entry{name: "evil", typ: tar.TypeSymlink, link: "/etc"}),
		layer(t, entry{name: "evil/cron.d/job", body: "* * * * * root sh"})))
	huge := reg.Push(t, "team/huge:v1", imageOf(t, v1.Config{Cmd: []string{"x"}}, sparseLayer(t, 1<<40)))
	c, _ := newCache(t, func(cfg *image.Config) { cfg.MaxBytes = 1 << 20 })
	for _, tc := range []struct {
		ref  string
		want string
		is   error
	}{
		{evil, `"evil": unsafe layer entry: it would replace a directory another layer holds`, image.ErrUnsafeLayer},
		{huge, "more than the cache's 1048576 bytes", image.ErrTooBig},
	} {
		img, err := c.Pull(context.Background(), tc.ref)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Acquire(context.Background(), img)
		if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.ref, err, tc.want)
		}
	}
	if s := c.Stats(); s.RootfsBytes != 0 || s.Unpacks != 0 {
		t.Errorf("stats %+v", s)
	}
}

// sparseTar is a tar holding one sparse file of size bytes, all of it a
// hole: a PAX (GNU 1.0) sparse entry of a few blocks that archive/tar
// reads as size bytes of zeros.
func sparseTar(t testing.TB, size int64) []byte {
	t.Helper()
	rec := func(k, v string) string {
		s := " " + k + "=" + v + "\n"
		n := len(s)
		for len(strconv.Itoa(n))+len(s) != n {
			n = len(strconv.Itoa(n)) + len(s)
		}
		return strconv.Itoa(n) + s
	}
	pax := rec("GNU.sparse.major", "1") + rec("GNU.sparse.minor", "0") + rec("GNU.sparse.name", "sparse") + rec("GNU.sparse.realsize", strconv.FormatInt(size, 10))
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	// archive/tar writes no sparse files: the extended header goes in as a
	// plain file whose type byte is then made 'x'.
	if err := tw.WriteHeader(&tar.Header{Name: "PaxHeader", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(pax)), Format: tar.FormatUSTAR}); err != nil {
		t.Fatal(err)
	}
	tw.Write([]byte(pax))
	tw.WriteHeader(&tar.Header{Name: "sparse", Typeflag: tar.TypeReg, Mode: 0o644, Size: 512, Format: tar.FormatUSTAR})
	tw.Write(append([]byte("0\n"), make([]byte, 510)...)) // the sparse map: no data fragments
	tw.Close()
	b := buf.Bytes()
	b[156] = tar.TypeXHeader
	copy(b[148:156], "        ")
	sum := 0
	for _, c := range b[:512] {
		sum += int(c)
	}
	copy(b[148:], fmt.Sprintf("%06o\x00 ", sum))
	return b
}

func sparseLayer(t *testing.T, size int64) v1.Layer {
	b := sparseTar(t, size)
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}
