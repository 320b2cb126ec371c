package mesh

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// IdentityFile is the name of the file in the data directory that holds the
// node's private key: an ed25519 libp2p key in libp2p's protobuf encoding,
// readable by its owner only (mode 0600).
const IdentityFile = "identity.key"

// ErrCorruptIdentity reports an identity file that exists but does not hold
// a usable ed25519 key. The node refuses to start rather than take on a new
// identity: its peers know it by the old one.
var ErrCorruptIdentity = errors.New("identity file is corrupt")

// LoadIdentity returns the node's private key from dir, creating dir (0700)
// and a fresh ed25519 key (0600) on first start. created tells whether the
// key was made now.
//
// It never replaces an existing key: a file that cannot be read or parsed is
// an error wrapping ErrCorruptIdentity (or the I/O error), and a directory
// that cannot be written on first start is an error naming the path.
func LoadIdentity(dir string) (key crypto.PrivKey, created bool, err error) {
	if dir == "" {
		return nil, false, errors.New("identity: no data directory given")
	}
	path := filepath.Join(dir, IdentityFile)
	raw, err := os.ReadFile(path)
	switch {
	case err == nil:
		key, err := parseIdentity(raw)
		if err != nil {
			return nil, false, fmt.Errorf("identity %s: %w: %v (move it away only if you mean to start as a new node)", path, ErrCorruptIdentity, err)
		}
		return key, false, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, false, fmt.Errorf("identity %s: %w", path, err)
	}

	key, _, err = crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		return nil, false, fmt.Errorf("identity: generate key: %w", err)
	}
	raw, err = crypto.MarshalPrivateKey(key)
	if err != nil {
		return nil, false, fmt.Errorf("identity: encode key: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("identity: data directory %s: %w", dir, err)
	}
	if err := writeFileExclusive(path, raw); err != nil {
		return nil, false, fmt.Errorf("identity %s: %w", path, err)
	}
	return key, true, nil
}

// parseIdentity decodes a stored key and insists on ed25519.
func parseIdentity(raw []byte) (crypto.PrivKey, error) {
	key, err := crypto.UnmarshalPrivateKey(raw)
	if err != nil {
		return nil, err
	}
	if key.Type() != crypto.Ed25519 {
		return nil, fmt.Errorf("key type %s, want Ed25519", key.Type())
	}
	if _, err := peer.IDFromPrivateKey(key); err != nil {
		return nil, err
	}
	return key, nil
}

// writeFileExclusive writes a new file with mode 0600 through a temporary
// file and a hard link, so that a crash leaves either no key or a whole one,
// and two processes starting at once cannot both create a key.
func writeFileExclusive(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".identity-*")
	if err != nil {
		return err
	}
	tmpName := tmp.Name()
	defer os.Remove(tmpName)
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	// Link fails if path exists: another process won the race, and its key
	// is the identity.
	if err := os.Link(tmpName, path); err != nil {
		return err
	}
	return nil
}
