package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/gossip"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/mesh"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/executor"
	"github.com/libp2p/go-libp2p/core/peer"
)

var _ api.Backend = (*Node)(nil)

// serveAPI starts serving the local API on ln.
func (n *Node) serveAPI(ln net.Listener, cfg api.Config) {
	var dash http.Handler
	if n.cfg.Dashboard != nil {
		dash = n.cfg.Dashboard
	}
	cfg.Network = n.mesh.Network()
	n.server = api.Serve(ln, api.Handler(cfg, tenantAPI{n}, dash)) // job operations for their owners only
	n.log.Info("API listening", "addr", n.server.Addr())
}

// logChunk is how much of a log one read returns.
const logChunk = 64 << 10

// Logs implements api.Backend: it finds the node that runs (or ran) the
// share and streams the attempt's output from it.
func (n *Node) Logs(ctx context.Context, req api.LogRequest, w io.Writer, flush func()) error {
	rec, err := n.Job(ctx, req.Job)
	if err != nil {
		return err
	}
	p, ok := latestPlacement(rec, req.Share)
	if !ok {
		if len(rec.Placements) == 0 {
			return api.Errorf(http.StatusNotFound, "job %s has not been placed yet (%s)", req.Job, rec.State)
		}
		return &api.HTTPError{Status: http.StatusNotFound, Field: "share", Err: fmt.Errorf("job %s has no share %d (shares: %v)", req.Job, req.Share, shares(rec))}
	}
	if req.Epoch != 0 {
		if p, err = attemptOfShare(rec, req.Share, req.Epoch); err != nil {
			return err
		}
	}
	write := func(b []byte) error {
		if _, err := w.Write(b); err != nil {
			return err
		}
		flush()
		return nil
	}
	stream := executor.Stream(req.Stream)
	if p.Node == n.self {
		return n.localLogs(ctx, attemptName(req.Job, p.Share, p.Epoch), stream, req.Offset, req.Follow, write)
	}
	pid, err := peer.Decode(p.Node)
	if err != nil {
		return err
	}
	if m, ok := n.mesh.Member(pid); ok && (m.State == mesh.StateDead || m.State == mesh.StateLeft) {
		// Its output stays on that machine: a call would only wait out
		// its timeout.
		return api.Errorf(http.StatusBadGateway, "job %s share %d epoch %d ran on %s, which %s: its output is there, out of reach",
			req.Job, p.Share, p.Epoch, pid.ShortString(), goneAs(m.State))
	}
	n.dialable(pid)
	lr := logsRequest{Job: req.Job, Share: p.Share, Epoch: p.Epoch, Stream: req.Stream, Offset: req.Offset, Follow: req.Follow}
	data, _ := json.Marshal(lr)
	data = n.sealCall(ctx, kindLogs, data, lr)
	err = n.direct.Call(ctx, pid, kindLogs, data, func(m gossip.Message) error {
		if m.Kind != kindLogChunk {
			return fmt.Errorf("unexpected %q frame in a log reply", m.Kind)
		}
		return write(m.Data)
	})
	if err != nil {
		if err = fromCallError(err); !isHTTPError(err) && ctx.Err() == nil {
			err = api.Errorf(http.StatusBadGateway, "job %s share %d epoch %d ran on %s, which did not answer: %v", req.Job, p.Share, p.Epoch, pid.ShortString(), err)
		}
		return err
	}
	return nil
}

// goneAs says how a member that membership declared gone went.
func goneAs(s mesh.State) string {
	if s == mesh.StateLeft {
		return "has left the mesh"
	}
	return "is dead (unreachable)"
}

func isHTTPError(err error) bool {
	var he *api.HTTPError
	return errors.As(err, &he)
}

// attemptOfShare is the placement of one attempt of a share, by epoch: a
// 404 naming the share's epochs when it has none of that epoch or the
// attempt never ran (its supplier rejected the award).
func attemptOfShare(rec market.JobRecord, share int, epoch uint64) (market.Placement, error) {
	var epochs []string
	for _, p := range rec.Placements {
		if p.Share != share {
			continue
		}
		if p.Epoch == epoch {
			if p.State == market.PlacementRejected {
				return p, &api.HTTPError{Status: http.StatusNotFound, Field: "epoch",
					Err: fmt.Errorf("job %s share %d epoch %d never ran: its supplier rejected the award", rec.ID, share, epoch)}
			}
			return p, nil
		}
		if p.State != market.PlacementRejected {
			epochs = append(epochs, strconv.FormatUint(p.Epoch, 10))
		}
	}
	return market.Placement{}, &api.HTTPError{Status: http.StatusNotFound, Field: "epoch",
		Err: fmt.Errorf("job %s share %d has no attempt of epoch %d (its attempts: epoch %s)", rec.ID, share, epoch, strings.Join(epochs, ", "))}
}

// localLogs streams an attempt's output from this node's files, following
// it while the attempt runs when follow is set.
func (n *Node) localLogs(ctx context.Context, name string, stream executor.Stream, offset int64, follow bool, write func([]byte) error) error {
	root := n.exec.Root()
	for {
		// An attempt's run stays known after it ends: it runs while its
		// Done is open. Changed is taken before the read, so no write
		// between the two is missed; Done is watched too, so that the end
		// is not missed either (its last wake may have come before).
		var changed, done <-chan struct{}
		run, running := n.exec.Lookup(name)
		if running {
			changed, done = run.Changed(), run.Done()
			select {
			case <-done:
				running = false // one last read, then the end
			default:
			}
		}
		b, next, err := executor.ReadLog(root, name, stream, offset, logChunk)
		if errors.Is(err, executor.ErrNoLog) {
			return api.Errorf(http.StatusNotFound, "no output of attempt %s on this node (a runner keeps an ended attempt's output for its --keep-logs, 7 days by default)", name)
		}
		if err != nil {
			return err
		}
		if len(b) > 0 {
			if err := write(b); err != nil {
				return err
			}
			offset = next
			continue
		}
		if !follow || !running {
			return nil
		}
		select {
		case <-changed:
		case <-done:
		case <-ctx.Done():
			return nil
		case <-n.ctx.Done():
			return nil
		}
	}
}

// Peers implements api.Backend.
func (n *Node) Peers(context.Context) ([]api.Peer, error) {
	now := time.Now()
	book := map[peer.ID]gossip.PeerSummary{}
	for _, s := range n.gossip.Book().Snapshot(now) {
		book[s.Peer] = s
	}
	members := n.mesh.Members()
	out := make([]api.Peer, 0, len(members))
	for _, m := range members {
		p := api.Peer{
			ID:          m.Name,
			Self:        m.Self,
			State:       m.State.String(),
			Region:      m.Region,
			Cards:       m.Cards,
			FreeCards:   m.FreeCards,
			Models:      m.Models,
			LastHeard:   m.LastHeard,
			RTTMillis:   float64(m.RTT.Microseconds()) / 1000,
			Coordinator: m.Coordinator,
			Standby:     m.Standby,
		}
		// The Book's figures when it has them: it holds no dead or
		// departed member's cards. Otherwise the membership's summary,
		// whose free count a dead or departed member cannot stand by.
		if s, ok := book[m.ID]; ok {
			p.Cards, p.FreeCards, p.Models, p.SimulatedModels = s.Cards, s.FreeCards, s.Models, s.Simulated
		} else if m.State == mesh.StateDead || m.State == mesh.StateLeft {
			p.FreeCards = 0
		}
		addrs := m.Addrs
		if m.Self {
			addrs = n.mesh.Host().Addrs()
		} else {
			p.Conn = n.mesh.Conn(m.ID)
		}
		for _, a := range addrs {
			p.Addrs = append(p.Addrs, fmt.Sprintf("%s/p2p/%s", a, m.ID))
		}
		if m.Self {
			out = append([]api.Peer{p}, out...)
		} else {
			out = append(out, p)
		}
	}
	return out, nil
}

// Cards implements api.Backend.
func (n *Node) Cards(ctx context.Context) ([]api.Card, error) {
	var statuses []market.CardStatus
	if err := n.do(ctx, func() { statuses = n.mk.Cards() }); err != nil {
		return nil, err
	}
	out := make([]api.Card, 0, len(statuses))
	for _, s := range statuses {
		out = append(out, api.Card{Card: s.Card, Simulated: s.Card.Simulated(), Healthy: s.Card.Health.Healthy, State: string(s.State), Job: s.Job, Share: s.Share, Epoch: s.Epoch})
	}
	return out, nil
}

// Subscribe implements api.Backend.
func (n *Node) Subscribe() (<-chan api.Event, func()) { return n.events.subscribe() }
