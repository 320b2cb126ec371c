package gossip

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pubsubpb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-msgio"
	"google.golang.org/protobuf/proto"
)

// Book sync. Ads are refreshed slowly in a large mesh (up to every 40
// minutes), so a node that joins would wait that long to learn what its
// peers offer. Instead it asks its first peers for their Books: the
// book-sync protocol streams back the signed pubsub messages of every ad the
// peer holds, exactly as their authors signed them. The joiner checks each
// one as if it had come over gossip (signature, author, every field, expiry,
// sequence number), so a peer serving a sync can withhold ads but never forge
// or alter one.
//
// Wire: the client opens a stream on Topics.BookSync and closes its write
// side; the server writes varint-length-prefixed pubsub Message protobufs
// and closes. Limits: maxSyncAds messages of at most maxSyncMessageSize
// bytes, within Config.SyncTimeout.
const (
	maxSyncAds         = 10_000
	maxSyncMessageSize = MaxEnvelopeSize + 1024
	// maxSyncServes bounds the syncs served at once; more are refused.
	maxSyncServes = 4
	// syncServeInterval is how often one peer may sync from us.
	syncServeInterval = 30 * time.Second
)

// ErrSyncRefused is returned by SyncFrom when the peer refused or cut the
// sync (busy, or asked too often).
var ErrSyncRefused = errors.New("gossip: book sync refused by peer")

// SyncFrom fetches p's Book and folds every ad that is new into this node's
// Book. It returns how many ads p sent and how many were new. A message
// that does not check out (bad signature, wrong topic, malformed or absurd
// ad) ends the sync with an error naming it: p served something no honest
// node holds. Stale, duplicate and expired ads are skipped.
func (g *Gossip) SyncFrom(ctx context.Context, p peer.ID) (sent, applied int, err error) {
	if g.ctx.Err() != nil {
		return 0, 0, ErrClosed
	}
	ctx, cancel := context.WithTimeout(ctx, g.cfg.SyncTimeout)
	defer cancel()
	s, err := g.host.NewStream(ctx, p, g.topics.BookSync)
	if err != nil {
		return 0, 0, fmt.Errorf("gossip: book sync with %s: %w", p, err)
	}
	defer s.Reset() // on every early return; harmless after Close
	defer context.AfterFunc(ctx, func() { s.Reset() })()
	if d, ok := ctx.Deadline(); ok {
		_ = s.SetDeadline(d)
	}
	_ = s.CloseWrite()
	r := msgio.NewVarintReaderSize(s, maxSyncMessageSize)
	for {
		b, err := r.ReadMsg()
		switch {
		case errors.Is(err, io.EOF):
			g.counters.syncs.Add(1)
			_ = s.Close()
			return sent, applied, nil
		case errors.Is(err, network.ErrReset) && sent == 0:
			return 0, 0, fmt.Errorf("%w: %s", ErrSyncRefused, p)
		case err != nil:
			return sent, applied, fmt.Errorf("gossip: book sync with %s: read: %w", p, err)
		}
		sent++
		if sent > maxSyncAds {
			return sent, applied, fmt.Errorf("gossip: book sync with %s: more than %d ads", p, maxSyncAds)
		}
		now := g.cfg.Clock.Now()
		ad, err := decodeSynced(b, g.topics.Capacity, now)
		if err == nil {
			err = g.cfg.Book.applySigned(ad, b, now)
		}
		r := ReasonOf(err)
		g.counters.synced(r)
		switch r.Verdict() {
		case Accept:
			applied++
			if g.cfg.OnAd != nil {
				g.cfg.OnAd(ad.clone())
			}
		case Reject:
			return sent, applied, fmt.Errorf("gossip: book sync with %s: ad %d: %w", p, sent, err)
		}
	}
}

// decodeSynced checks one message of a book sync as gossipsub and the
// capacity validator would have: a pubsub message on topic, signed by its
// author, carrying a good ad.
func decodeSynced(b []byte, topic string, now time.Time) (Ad, error) {
	m := new(pubsubpb.Message)
	if err := proto.Unmarshal(b, m); err != nil {
		return Ad{}, msgErr(ReasonMalformed, "pubsub message: %v", err)
	}
	if m.GetTopic() != topic {
		return Ad{}, msgErr(ReasonProtocol, "topic %q, want %q", m.GetTopic(), topic)
	}
	if err := verifySignature(m); err != nil {
		return Ad{}, err
	}
	return DecodeAd(m.GetData(), peer.ID(m.GetFrom()), now)
}

// verifySignature checks a pubsub message's signature as the libp2p pubsub
// spec defines it: the author's key signs "libp2p-pubsub:" followed by the
// message encoded without its signature and key fields.
func verifySignature(m *pubsubpb.Message) error {
	if len(m.GetSignature()) == 0 {
		return msgErr(ReasonUnsigned, "no signature")
	}
	author, err := peer.IDFromBytes(m.GetFrom())
	if err != nil {
		return msgErr(ReasonBadSender, "author: %v", err)
	}
	var key crypto.PubKey
	if len(m.GetKey()) == 0 {
		key, err = author.ExtractPublicKey()
	} else if key, err = crypto.UnmarshalPublicKey(m.GetKey()); err == nil && !author.MatchesPublicKey(key) {
		err = errors.New("key does not match the author")
	}
	if err != nil || key == nil {
		return msgErr(ReasonBadSignature, "author's key: %v", err)
	}
	unsigned := proto.CloneOf(m)
	unsigned.Signature, unsigned.Key = nil, nil
	body, err := proto.Marshal(unsigned)
	if err != nil {
		return msgErr(ReasonMalformed, "%v", err)
	}
	if ok, err := key.Verify(append([]byte(pubsub.SignPrefix), body...), m.GetSignature()); err != nil || !ok {
		return msgErr(ReasonBadSignature, "signature does not verify (%v)", err)
	}
	return nil
}

// serveSync answers a peer's book sync: every signed ad the Book holds.
func (g *Gossip) serveSync(s network.Stream) {
	if !g.startServe() {
		s.Reset()
		return
	}
	defer g.serving.Done()
	p := s.Conn().RemotePeer()
	select {
	case g.serveSlots <- struct{}{}:
		defer func() { <-g.serveSlots }()
	default:
		g.log.Debug("book sync refused: busy", "peer", p)
		s.Reset()
		return
	}
	now := g.cfg.Clock.Now()
	if !g.mayServe(p, now) {
		g.log.Debug("book sync refused: asked again too soon", "peer", p)
		s.Reset()
		return
	}
	_ = s.SetDeadline(time.Now().Add(g.cfg.SyncTimeout))
	defer context.AfterFunc(g.ctx, func() { s.Reset() })() // Close cuts a slow reader short
	w := msgio.NewVarintWriter(s)
	for _, b := range g.cfg.Book.signedAds(now, maxSyncAds) {
		if err := w.WriteMsg(b); err != nil {
			s.Reset()
			return
		}
	}
	_ = s.Close()
}

// startServe registers a serve with Close, or reports that Close has begun.
func (g *Gossip) startServe() bool {
	g.serveMu.Lock()
	defer g.serveMu.Unlock()
	if g.closing {
		return false
	}
	g.serving.Add(1)
	return true
}

// mayServe allows one sync per peer per syncServeInterval.
func (g *Gossip) mayServe(p peer.ID, now time.Time) bool {
	g.serveMu.Lock()
	defer g.serveMu.Unlock()
	for q, at := range g.served {
		if now.Sub(at) >= syncServeInterval {
			delete(g.served, q)
		}
	}
	if _, recent := g.served[p]; recent {
		return false
	}
	g.served[p] = now
	return true
}

// syncLoop syncs the Book from the first Config.SyncPeers peers that join
// the capacity topic and have ads to give, then ends.
func (g *Gossip) syncLoop(events *pubsub.TopicEventHandler) {
	defer close(g.syncDone)
	defer events.Cancel()
	for synced := 0; synced < g.cfg.SyncPeers; {
		ev, err := events.NextPeerEvent(g.ctx)
		if err != nil {
			return // Close
		}
		if ev.Type != pubsub.PeerJoin {
			continue
		}
		sent, applied, err := g.SyncFrom(g.ctx, ev.Peer)
		if err != nil {
			g.log.Debug("book sync", "peer", ev.Peer, "err", err)
			continue
		}
		g.log.Debug("book synced", "peer", ev.Peer, "sent", sent, "new", applied)
		if sent > 0 {
			synced++
		}
	}
}
