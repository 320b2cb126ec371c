package ownerkey

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestCreateWritesAKeyThatLoadReadsBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "conf", "gpumesh", FileName)
	k, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "windows" {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if perm := fi.Mode().Perm(); perm != 0o600 {
			t.Errorf("key file mode %04o, want 0600", perm)
		}
		di, err := os.Stat(filepath.Dir(path))
		if err != nil {
			t.Fatal(err)
		}
		if perm := di.Mode().Perm(); perm != 0o700 {
			t.Errorf("key directory mode %04o, want 0700", perm)
		}
	}
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID() != k.ID() {
		t.Errorf("loaded key %s, created %s", got.ID(), k.ID())
	}
}

func TestCreateNeverOverwritesAKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	first, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Create(path); !errors.Is(err, ErrExists) {
		t.Fatalf("second Create: %v, want ErrExists", err)
	}
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID() != first.ID() {
		t.Errorf("after a refused Create the file holds %s, want the first key %s", got.ID(), first.ID())
	}
}

func TestLoadOrCreateMakesOneKeyAndKeepsIt(t *testing.T) {
	dir := t.TempDir()
	a, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if a.ID() != b.ID() {
		t.Errorf("second LoadOrCreate gave %s, the first made %s", b.ID(), a.ID())
	}
	if _, err := os.Stat(filepath.Join(dir, FileName)); err != nil {
		t.Errorf("the key is not at %s: %v", FileName, err)
	}
}

func TestLoadRefusesWhatIsNotAKeyAndNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.key")
	if err := os.WriteFile(garbage, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{garbage, garbage},
		{filepath.Join(dir, "missing.key"), "missing.key"},
	} {
		_, err := Load(tc.path)
		if err == nil {
			t.Errorf("Load(%s) succeeded", tc.path)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Load(%s): %q does not name %s", tc.path, err, tc.want)
		}
	}
}

func TestLoadRefusesAKeyOthersMayRead(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("Windows guards files with ACLs, not mode bits")
	}
	path := filepath.Join(t.TempDir(), FileName)
	if _, err := Create(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("Load of a 0644 key: %v, want a refusal that says chmod 600", err)
	}
}
