package mesh

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

func TestLoadIdentityCreatesThenReloadsTheSameKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	k1, created, err := LoadIdentity(dir)
	if err != nil || !created {
		t.Fatalf("first start: created=%v err=%v", created, err)
	}
	if k1.Type() != crypto.Ed25519 {
		t.Fatalf("key type %v, want Ed25519", k1.Type())
	}
	info, err := os.Stat(filepath.Join(dir, IdentityFile))
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "windows" && info.Mode().Perm() != 0o600 {
		t.Errorf("identity file mode %v, want 0600", info.Mode().Perm())
	}
	k2, created, err := LoadIdentity(dir)
	if err != nil || created {
		t.Fatalf("second start: created=%v err=%v", created, err)
	}
	id1, _ := peer.IDFromPrivateKey(k1)
	id2, _ := peer.IDFromPrivateKey(k2)
	if id1 != id2 {
		t.Fatalf("reload changed the identity: %s then %s", id1, id2)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("data dir holds %d entries, want only the key (no temp files left)", len(entries))
	}
}

func TestLoadIdentityRefusesACorruptKey(t *testing.T) {
	for name, content := range map[string][]byte{
		"garbage":   []byte("not a key at all"),
		"empty":     {},
		"truncated": truncatedKey(t),
		"rsa":       keyBytes(t, crypto.RSA),
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, IdentityFile)
			if err := os.WriteFile(path, content, 0o600); err != nil {
				t.Fatal(err)
			}
			_, _, err := LoadIdentity(dir)
			if !errors.Is(err, ErrCorruptIdentity) {
				t.Fatalf("err = %v, want ErrCorruptIdentity", err)
			}
			after, _ := os.ReadFile(path)
			if string(after) != string(content) {
				t.Fatal("the corrupt key file was changed")
			}
		})
	}
}

func truncatedKey(t *testing.T) []byte {
	b := keyBytes(t, crypto.Ed25519)
	return b[:len(b)/2]
}

func keyBytes(t *testing.T, typ int) []byte {
	t.Helper()
	k, _, err := crypto.GenerateKeyPair(typ, 2048)
	if err != nil {
		t.Fatal(err)
	}
	b, err := crypto.MarshalPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestLoadIdentityUnwritableDirIsAnError(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("directory permissions do not apply on Windows")
	}
	parent := t.TempDir()
	if err := os.Chmod(parent, 0o500); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(parent, 0o700) })
	dir := filepath.Join(parent, "data")
	if os.Getuid() == 0 {
		// root writes anywhere: make the data dir path a file instead.
		dir = filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(dir, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, _, err := LoadIdentity(dir)
	if err == nil {
		t.Fatal("LoadIdentity in an unwritable place succeeded")
	}
	t.Logf("error: %v", err)
}

func TestLoadIdentityUnreadableKeyIsNotReplaced(t *testing.T) {
	if runtime.GOOS == "windows" || os.Getuid() == 0 {
		t.Skip("needs a non-root user on a Unix file system to make a file unreadable")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, IdentityFile)
	if err := os.WriteFile(path, keyBytes(t, crypto.Ed25519), 0o000); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadIdentity(dir); err == nil {
		t.Fatal("unreadable key accepted")
	}
}

func TestNewRefusesCorruptIdentity(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, IdentityFile), []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := New(Config{DataDir: dir, DisableNAT: true, ListenAddrs: loopbackTCP()})
	if !errors.Is(err, ErrCorruptIdentity) {
		t.Fatalf("New with a corrupt key: %v, want ErrCorruptIdentity", err)
	}
}
