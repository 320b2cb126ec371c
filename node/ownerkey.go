package node

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gpumesh/gpumesh/market/owner"
)

// OwnerKeyFile is the name of the node's own owner key in its data dir:
// the key that signs specs submitted, and requests made, through the Go API
// in-process (Config.Owner overrides it).
const OwnerKeyFile = "owner.key"

// ErrKeyExists is returned by CreateOwnerKey for a path that exists.
var ErrKeyExists = errors.New("an owner key exists there already")

// CreateOwnerKey makes a new owner key and writes it to path, mode 0600, in
// a directory made 0700 if missing. It never overwrites: a path that exists
// is ErrKeyExists.
func CreateOwnerKey(path string) (owner.Key, error) {
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
		return owner.Key{}, fmt.Errorf("%s: %w", path, ErrKeyExists)
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

// LoadOwnerKey reads the owner key at path. It refuses a key file that
// others may read (mode beyond 0600 on Unix), as ssh does.
func LoadOwnerKey(path string) (owner.Key, error) {
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

// loadOrCreateOwnerKey is the node's own key: read from dir, or made there.
func loadOrCreateOwnerKey(dir string) (owner.Key, error) {
	path := filepath.Join(dir, OwnerKeyFile)
	k, err := CreateOwnerKey(path)
	if errors.Is(err, ErrKeyExists) {
		return LoadOwnerKey(path)
	}
	return k, err
}

// nodeOwnerKey is Config.Owner, else the key in the data dir.
func nodeOwnerKey(cfg Config) (owner.Key, error) {
	if cfg.Owner != nil {
		if !cfg.Owner.Valid() {
			return owner.Key{}, errors.New("node: Config.Owner is the zero key")
		}
		return *cfg.Owner, nil
	}
	k, err := loadOrCreateOwnerKey(cfg.DataDir)
	if err != nil {
		return owner.Key{}, fmt.Errorf("node: %w", err)
	}
	return k, nil
}
