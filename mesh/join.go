package mesh

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	ma "github.com/multiformats/go-multiaddr"
)

// ErrJoinFailed is the error of a join that no peer accepted. Its JoinError
// says, peer by peer, what went wrong.
var ErrJoinFailed = errors.New("join failed: no peer accepted (wrong network name or secret?)")

// JoinError is the error of a failed join: one entry per peer tried.
type JoinError struct {
	Attempts []JoinAttempt
}

// JoinAttempt is what happened with one peer of a join.
type JoinAttempt struct {
	Peer peer.ID
	Err  error
}

func (e *JoinError) Error() string {
	var b strings.Builder
	b.WriteString(ErrJoinFailed.Error())
	for i, a := range e.Attempts {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s: %v", a.Peer.ShortString(), a.Err)
	}
	return b.String()
}

// Unwrap makes errors.Is(err, ErrJoinFailed) true.
func (e *JoinError) Unwrap() error { return ErrJoinFailed }

// Join contacts the peers at addrs (full multiaddrs ending in /p2p/<peer
// ID>), exchanges membership state with each that answers, and returns how
// many did. It fails with a *JoinError (errors.Is ErrJoinFailed) if none
// did, naming the reason for each peer as far as the protocols tell it: a
// peer of another network name does not serve this network's protocols, a
// peer with another secret fails the connection handshake (TCP) or the
// membership exchange (its keyring cannot decrypt ours). Addresses of this
// node itself are skipped.
func (m *Mesh) Join(ctx context.Context, addrs ...ma.Multiaddr) (int, error) {
	infos, err := peer.AddrInfosFromP2pAddrs(addrs...)
	if err != nil {
		return 0, fmt.Errorf("mesh: join addresses: want full multiaddrs ending in /p2p/<peer ID>: %w", err)
	}
	return m.join(ctx, infos)
}

func (m *Mesh) join(ctx context.Context, infos []peer.AddrInfo) (int, error) {
	select {
	case <-m.done:
		return 0, ErrClosed
	default:
	}
	jerr := &JoinError{}
	joined := 0
	for _, info := range infos {
		if info.ID == m.h.ID() {
			continue
		}
		if err := m.joinPeer(ctx, info); err != nil {
			jerr.Attempts = append(jerr.Attempts, JoinAttempt{Peer: info.ID, Err: err})
			continue
		}
		joined++
	}
	if joined == 0 && len(jerr.Attempts) > 0 {
		return 0, jerr
	}
	if joined > 0 {
		select {
		case m.joined <- struct{}{}:
		default:
		}
	}
	return joined, nil
}

// joinPeer connects to one peer and runs memberlist's join with it.
func (m *Mesh) joinPeer(ctx context.Context, info peer.AddrInfo) error {
	if len(info.Addrs) > 0 {
		m.h.Peerstore().AddAddrs(info.ID, info.Addrs, peerstore.TempAddrTTL)
	}
	if m.tr.cfg.beforeDial != nil {
		if err := m.tr.cfg.beforeDial(ctx, info.ID); err != nil {
			return fmt.Errorf("unreachable: %w", err)
		}
	}
	// Dial first, for a clear error when the peer cannot be reached or
	// the connection handshake fails.
	if _, err := m.h.Network().DialPeer(ctx, info.ID); err != nil {
		return explainConnectError(err)
	}
	if _, err := m.ml.Join([]string{info.ID.String() + "/" + swimHostPort(info.ID)}); err != nil {
		if m.tr.isForeign(info.ID) {
			return fmt.Errorf("peer does not serve network %q (wrong network name?)", m.cfg.Network)
		}
		return fmt.Errorf("membership exchange failed (another secret, or another network name?): %w", unwrapMultierror(err))
	}
	return nil
}

// explainConnectError adds the likely cause to a libp2p connection error.
func explainConnectError(err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "failed to negotiate security protocol"),
		strings.Contains(msg, "failed to read nonce"),
		strings.Contains(msg, "pnet"):
		return fmt.Errorf("connection handshake failed (another secret, or a public node and a private one?): %w", err)
	default:
		return fmt.Errorf("unreachable: %w", err)
	}
}

// unwrapMultierror shortens memberlist's "1 error occurred:\n\t* ..." text.
func unwrapMultierror(err error) error {
	msg := err.Error()
	if i := strings.Index(msg, "* "); i >= 0 {
		return errors.New(strings.TrimSpace(msg[i+2:]))
	}
	return err
}

// resyncAfter are the delays after a successful join at which the node
// exchanges its state once more with a random member. A join copies the
// state of the peer joined; when many nodes join at once through different
// peers, that state lacks the nodes that joined elsewhere a moment before,
// and gossip of their arrival may be over by then: without a resync the
// node would wait for the next periodic exchange (minutes in a large mesh).
var resyncAfter = [...]time.Duration{2 * time.Second, 8 * time.Second}

// loop keeps the node in a mesh: it joins the bootstrap peers with
// exponential backoff until one answers, tries them again whenever the node
// finds itself alone, joins peers found by mDNS, and resynchronizes after
// every join.
func (m *Mesh) loop() {
	defer m.wg.Done()
	infos, _ := peer.AddrInfosFromP2pAddrs(m.cfg.Join...) // Validate checked them
	delay := m.cfg.JoinRetryMin
	bootstrap := time.NewTimer(0)
	defer bootstrap.Stop()
	if len(infos) == 0 {
		bootstrap.Stop()
	}
	resync := time.NewTimer(time.Hour)
	resync.Stop()
	defer resync.Stop()
	step := len(resyncAfter)
	joined := false
	for {
		select {
		case <-m.done:
			return
		case <-m.joined:
			step = 0
			resync.Reset(resyncAfter[0])
		case <-resync.C:
			m.resync()
			if step++; step < len(resyncAfter) {
				resync.Reset(resyncAfter[step] - resyncAfter[step-1])
			}
		case info := <-m.found:
			if info.ID == m.h.ID() || m.table.isAlive(info.ID) {
				continue
			}
			ctx, cancel := m.joinContext()
			if _, err := m.join(ctx, []peer.AddrInfo{info}); err != nil {
				m.log.Debug("mesh: cannot join peer found by mDNS", "peer", info.ID, "err", err)
			} else {
				m.log.Info("mesh: joined peer found by mDNS", "peer", info.ID)
			}
			cancel()
		case <-bootstrap.C:
			if joined && m.table.numAlive() > 1 {
				bootstrap.Reset(m.cfg.RejoinInterval)
				continue
			}
			ctx, cancel := m.joinContext()
			n, err := m.join(ctx, infos)
			cancel()
			if err != nil {
				m.joinFailures.Add(1)
				m.log.Warn("mesh: bootstrap peers unreachable; running alone, will retry", "retry_in", delay, "err", err)
				bootstrap.Reset(jitter(delay))
				delay = min(2*delay, m.cfg.JoinRetryMax)
				continue
			}
			m.log.Info("mesh: joined the mesh", "peers_answered", n, "members", m.table.numAlive())
			joined = true
			delay = m.cfg.JoinRetryMin
			if m.cfg.RejoinInterval > 0 {
				bootstrap.Reset(m.cfg.RejoinInterval)
			}
		}
	}
}

// resync exchanges state with one random alive member.
func (m *Mesh) resync() {
	id, ok := m.table.randomAlive()
	if !ok {
		return
	}
	if _, err := m.ml.Join([]string{id.String() + "/" + swimHostPort(id)}); err != nil {
		m.log.Debug("mesh: resync failed", "peer", id, "err", unwrapMultierror(err))
	}
}

// joinContext bounds one join attempt and ends it when the mesh closes.
func (m *Mesh) joinContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(m.ctx, m.cfg.Profile.StreamTimeout)
}

// jitter spreads retries of many nodes: d ± 20%.
func jitter(d time.Duration) time.Duration {
	return d + time.Duration((rand.Float64()*0.4-0.2)*float64(d))
}
