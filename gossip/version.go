package gossip

import (
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// NewerPeer is a peer that sent a message of a newer wire version than
// this node reads: the message was refused, and the operator should
// upgrade (a newer peer reads this node's older messages; the reverse is
// not promised).
type NewerPeer struct {
	Peer peer.ID
	// Protocol names what was refused: "gossip" (the envelope of ads,
	// broadcasts and direct messages) or "market" (market messages).
	Protocol string
	// Version is what the peer speaks; Reads what this node reads.
	Version, Reads uint32
	// Seen is when it was last heard.
	Seen time.Time
}

// Versions records the peers that speak a newer wire version, for the
// node's status. Its methods may be called from any goroutine; the zero
// value is not ready: use NewVersions. A nil *Versions records nothing.
type Versions struct {
	mu    sync.Mutex
	peers map[versionKey]NewerPeer
}

type versionKey struct {
	peer     peer.ID
	protocol string
}

// NewVersions returns an empty record.
func NewVersions() *Versions { return &Versions{peers: map[versionKey]NewerPeer{}} }

// Note records that p sent a message of protocol at version, which this
// node (reading reads) refused. Older versions are not noted.
func (v *Versions) Note(p peer.ID, protocol string, version, reads uint32, now time.Time) {
	if v == nil || version <= reads {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.peers[versionKey{p, protocol}] = NewerPeer{Peer: p, Protocol: protocol, Version: version, Reads: reads, Seen: now}
}

// Newer lists the peers noted since, by peer and protocol.
func (v *Versions) Newer(since time.Time) []NewerPeer {
	if v == nil {
		return nil
	}
	v.mu.Lock()
	out := make([]NewerPeer, 0, len(v.peers))
	for _, np := range v.peers {
		if !np.Seen.Before(since) {
			out = append(out, np)
		}
	}
	v.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Peer != out[j].Peer {
			return out[i].Peer < out[j].Peer
		}
		return out[i].Protocol < out[j].Protocol
	})
	return out
}

// noteVersion records err's sender in vs when err is a newer envelope
// version.
func noteVersion(vs *Versions, from peer.ID, err error, now time.Time) {
	var me *MessageError
	if errors.As(err, &me) && me.Reason == ReasonVersion {
		vs.Note(from, "gossip", me.Version, Version, now)
	}
}
