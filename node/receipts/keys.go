package receipts

import (
	"crypto/ed25519"
	"fmt"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// PublicKey returns the ed25519 key a libp2p peer ID embeds: a receipt is
// checked against the IDs it names, with no network and no key server.
func PublicKey(id string) (ed25519.PublicKey, error) {
	p, err := peer.Decode(id)
	if err != nil {
		return nil, fmt.Errorf("peer ID %q: %w", id, err)
	}
	pk, err := p.ExtractPublicKey()
	if err != nil {
		return nil, fmt.Errorf("peer ID %s: %w", short(id), err)
	}
	if pk.Type() != crypto.Ed25519 {
		return nil, fmt.Errorf("peer ID %s: a %s key; receipts are signed with ed25519", short(id), pk.Type())
	}
	raw, err := pk.Raw()
	if err != nil || len(raw) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("peer ID %s: bad ed25519 key", short(id))
	}
	return ed25519.PublicKey(raw), nil
}

// PrivateKey returns a libp2p identity key as an ed25519 key.
func PrivateKey(k crypto.PrivKey) (ed25519.PrivateKey, error) {
	if k == nil || k.Type() != crypto.Ed25519 {
		return nil, fmt.Errorf("receipts: the node's identity is not an ed25519 key")
	}
	raw, err := k.Raw()
	if err != nil || len(raw) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("receipts: the node's identity key does not read as ed25519")
	}
	return ed25519.PrivateKey(raw), nil
}

// keyCache remembers the keys of peer IDs already parsed.
type keyCache map[string]ed25519.PublicKey

func (c keyCache) get(id string) (ed25519.PublicKey, error) {
	if k, ok := c[id]; ok {
		return k, nil
	}
	k, err := PublicKey(id)
	if err != nil {
		return nil, err
	}
	if len(c) > 4096 {
		clear(c)
	}
	c[id] = k
	return k, nil
}
