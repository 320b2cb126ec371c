package gossip

import (
	"crypto/sha256"
	"encoding/binary"

	pubsubpb "github.com/libp2p/go-libp2p-pubsub/pb"
)

// messageIDSize is the length of a gossipsub message ID in a gpumesh mesh.
const messageIDSize = 16

// messageID is the gossipsub message ID of a gpumesh mesh: the first 16
// bytes of SHA-256 over the author's peer ID (length-prefixed) and the
// pubsub seqno, where gossipsub's default is the two concatenated (46 bytes
// with an ed25519 peer ID). IHAVE, IWANT and IDONTWANT carry lists of IDs,
// so this cuts their size by about two thirds; a 128-bit hash keeps
// collisions out of reach (an author gains nothing by colliding with its own
// messages, and reaching another author's ID needs a second preimage).
// Every node of a network must compute IDs the same way: the function is
// part of the "/v1/" protocol.
func messageID(m *pubsubpb.Message) string {
	from, seqno := m.GetFrom(), m.GetSeqno()
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(from)))])
	h.Write(from)
	h.Write(seqno)
	var sum [sha256.Size]byte
	return string(h.Sum(sum[:0])[:messageIDSize])
}
