// Package ownerkey keeps an owner's signing key in a file: made once,
// never overwritten, mode 0600, and refused when others may read it.
package ownerkey

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gpumesh/gpumesh/market/owner"
)

// FileName is the name an owner key has in a directory: a node's own key in
// its data dir (the key that signs what is submitted through the Go API
// in-process), and a user's default key in ~/.config/gpumesh.
const FileName = "owner.key"

// ErrExists is returned by Create for a path that exists.
var ErrExists = errors.New("an owner key exists there already")

// Create makes a new owner key and writes it to path, mode 0600, in
// a directory made 0700 if missing. It never overwrites: a path that exists
// is ErrExists.
func Create(path string) (owner.Key, error) {
	k, err := owner.NewKey(rand.Reader)
	if err != nil {
		return owner.Key{}, err
	}
	text, err := k.MarshalText()
	if err != nil {
		return owner.Key{}, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return owner.Key{}, fmt.Errorf("owner key: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return owner.Key{}, fmt.Errorf("%s: %w", path, ErrExists)
	}
	if err != nil {
		return owner.Key{}, fmt.Errorf("owner key: %w", err)
	}
	if _, err := f.Write(text); err != nil {
		f.Close()
		os.Remove(path)
		return owner.Key{}, fmt.Errorf("owner key %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(path)
		return owner.Key{}, fmt.Errorf("owner key %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return owner.Key{}, fmt.Errorf("owner key %s: %w", path, err)
	}
	return k, nil
}

// Load reads the owner key at path. It refuses a key file that
// others may read (mode beyond 0600 on Unix), as ssh does.
func Load(path string) (owner.Key, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return owner.Key{}, fmt.Errorf("owner key: %w", err)
	}
	if err := checkKeyMode(path, fi); err != nil {
		return owner.Key{}, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return owner.Key{}, fmt.Errorf("owner key: %w", err)
	}
	k, err := owner.ParseKey(data)
	if err != nil {
		return owner.Key{}, fmt.Errorf("owner key %s: %w", path, err)
	}
	return k, nil
}

// LoadOrCreate is the key named FileName in dir: read, or made there if
// there is none.
func LoadOrCreate(dir string) (owner.Key, error) {
	path := filepath.Join(dir, FileName)
	k, err := Create(path)
	if errors.Is(err, ErrExists) {
		return Load(path)
	}
	return k, err
}
