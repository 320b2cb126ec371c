package mesh

import (
	"crypto/hkdf"
	"crypto/sha256"
	"fmt"
)

// MinSecretLen is the shortest mesh secret accepted, in bytes.
const MinSecretLen = 16

// Labels that keep the keys derived from one mesh secret apart. Changing one
// splits every existing private mesh, so they are versioned.
const (
	pnetKeyLabel       = "gpumesh/v1 libp2p private network key"
	memberlistKeyLabel = "gpumesh/v1 memberlist keyring key"
	secretSalt         = "gpumesh mesh secret"
)

// meshKeys are the keys a private mesh derives from its secret.
type meshKeys struct {
	psk        []byte // 32 bytes: libp2p private network (pnet) pre-shared key
	memberlist []byte // 32 bytes: memberlist keyring key (AES-256-GCM)
}

// deriveKeys expands the mesh secret with HKDF-SHA256 into independent keys,
// one per label, so that neither key reveals the other or the secret.
func deriveKeys(secret []byte) (meshKeys, error) {
	if len(secret) < MinSecretLen {
		return meshKeys{}, fmt.Errorf("mesh secret is %d bytes; need at least %d", len(secret), MinSecretLen)
	}
	psk, err := hkdf.Key(sha256.New, secret, []byte(secretSalt), pnetKeyLabel, 32)
	if err != nil {
		return meshKeys{}, fmt.Errorf("derive private network key: %w", err)
	}
	ml, err := hkdf.Key(sha256.New, secret, []byte(secretSalt), memberlistKeyLabel, 32)
	if err != nil {
		return meshKeys{}, fmt.Errorf("derive memberlist key: %w", err)
	}
	return meshKeys{psk: psk, memberlist: ml}, nil
}
