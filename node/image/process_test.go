package image_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/gpumesh/gpumesh/node/image"
	"github.com/gpumesh/gpumesh/node/image/imagetest"
)

// The image's Entrypoint, Cmd, Env, WorkingDir and User make the process
// as docker run makes it; the job's command replaces Cmd.
func TestProcess(t *testing.T) {
	rootfs := t.TempDir()
	os.MkdirAll(filepath.Join(rootfs, "etc"), 0o755)
	os.WriteFile(filepath.Join(rootfs, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n"), 0o644)
	os.WriteFile(filepath.Join(rootfs, "etc/group"), []byte("root:x:0:\napp:x:1000:\nvideo:x:44:app\nrender:x:105:app,other\n"), 0o644)
	for _, tc := range []struct {
		name    string
		cfg     v1.Config
		command []string
		want    image.Process
		err     string
	}{
		{"cmd only", v1.Config{Cmd: []string{"python", "-V"}}, nil, image.Process{Args: []string{"python", "-V"}, Cwd: "/"}, ""},
		{"command replaces cmd", v1.Config{Entrypoint: []string{"/entry.sh"}, Cmd: []string{"serve"}, Env: []string{"A=1"}, WorkingDir: "/app"},
			[]string{"train", "--lr", "1"}, image.Process{Args: []string{"/entry.sh", "train", "--lr", "1"}, Env: []string{"A=1"}, Cwd: "/app"}, ""},
		{"entrypoint and cmd", v1.Config{Entrypoint: []string{"/entry.sh"}, Cmd: []string{"serve"}}, nil, image.Process{Args: []string{"/entry.sh", "serve"}, Cwd: "/"}, ""},
		{"user by name", v1.Config{Cmd: []string{"x"}, User: "app"}, nil, image.Process{Args: []string{"x"}, Cwd: "/", UID: 1000, GID: 1000, Groups: []uint32{44, 105}}, ""},
		{"user and group by number", v1.Config{Cmd: []string{"x"}, User: "1234:44"}, nil, image.Process{Args: []string{"x"}, Cwd: "/", UID: 1234, GID: 44}, ""},
		{"user by name, group by name", v1.Config{Cmd: []string{"x"}, User: "app:video"}, nil, image.Process{Args: []string{"x"}, Cwd: "/", UID: 1000, GID: 44, Groups: []uint32{105}}, ""},
		{"relative working dir", v1.Config{Cmd: []string{"x"}, WorkingDir: "work"}, nil, image.Process{Args: []string{"x"}, Cwd: "/work"}, ""},
		{"no command", v1.Config{}, nil, image.Process{}, "no command"},
		{"unknown user", v1.Config{Cmd: []string{"x"}, User: "nobody-here"}, nil, image.Process{}, `no user "nobody-here"`},
		{"unknown group", v1.Config{Cmd: []string{"x"}, User: "app:nogroup"}, nil, image.Process{}, `no group "nogroup"`},
		{"uid out of range", v1.Config{Cmd: []string{"x"}, User: "70000"}, nil, image.Process{}, `no user "70000"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := &image.Image{Config: tc.cfg}
			got, err := img.Process(rootfs, tc.command)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %+v %v, want %q", got, err, tc.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v %v\nwant %+v", got, err, tc.want)
			}
		})
	}
	if _, err := (&image.Image{}).Process(rootfs, nil); !errors.Is(err, image.ErrNoCommand) {
		t.Errorf("no command: %v", err)
	}
}

// The cache keeps root file systems under its cap: one no attempt uses
// goes, least recently used first, to make room; one in use stays, and
// an image that cannot fit beside the ones in use is refused.
func TestRootfsCacheCap(t *testing.T) {
	reg := imagetest.New(t)
	refs := map[string]string{}
	for _, n := range []string{"a", "b", "c"} {
		refs[n] = reg.Push(t, "team/"+n+":v1", imageOf(t, v1.Config{Cmd: []string{"x"}}, layer(t, entry{name: "f", body: strings.Repeat(n, 600)})))
	}
	c, _ := newCache(t, func(cfg *image.Config) { cfg.MaxBytes = 1000 })
	ctx := context.Background()
	acquire := func(n string) (*image.Root, error) {
		img, err := c.Pull(ctx, refs[n])
		if err != nil {
			t.Fatal(err)
		}
		return c.Acquire(ctx, img)
	}
	a, err := acquire("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := acquire("b"); !errors.Is(err, image.ErrTooBig) || !strings.Contains(err.Error(), "the images attempts use take 600") {
		t.Fatalf("b beside a in use: %v", err)
	}
	aDir := a.Dir()
	a.Release()
	b, err := acquire("b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(aDir); !os.IsNotExist(err) {
		t.Errorf("a's root file system is still there: %v", err)
	}
	b.Release()
	if s := c.Stats(); s.RootfsBytes != 600 || s.Unpacks != 2 {
		t.Errorf("stats %+v", s)
	}
	if freed := c.GC(); freed != 600 {
		t.Errorf("GC freed %d", freed)
	}
	// A cache reopened after a crash mid-unpack removes the unfinished one.
	cdir := filepath.Dir(filepath.Dir(aDir))
	os.MkdirAll(filepath.Join(cdir, "rootfs", strings.Repeat("e", 64), "usr"), 0o755)
	c.Close()
	st2 := openStoreFor(t)
	c2, err := image.Open(image.Config{Dir: cdir, Blobs: st2})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := os.Stat(filepath.Join(cdir, "rootfs", strings.Repeat("e", 64))); !os.IsNotExist(err) {
		t.Errorf("an unfinished root file system survived Open: %v", err)
	}
}
