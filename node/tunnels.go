package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/internal/portuse"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/owner"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/executor"
	"github.com/gpumesh/gpumesh/node/tunnel"
	"github.com/gpumesh/gpumesh/node/tunnel/wire"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Tunnels into running jobs (node/tunnel), wired into the node:
//
//   - The API (tenantAPI, api.Tunneler) takes an owner's exec,
//     port-forward and service requests, checks them against the job's
//     record (whose job, which share runs where), and opens a tunnel to
//     the node that runs the share, carrying the owner's signed request
//     (for an owner-token caller, one this node signs with the owner's
//     key, as sealCall does).
//   - As a runner, the node answers tunnels into its own attempts
//     (tunnels.Target): the attempt's owner and service come from the
//     owner's signed spec in its award (market.Attempt), and the tunnel
//     package checks the request against them.
//   - It probes the readiness of the service replicas it runs and tells
//     their coordinator (market.ExecutionReady), and an --ingress listener
//     serves public services to anyone.

// probeScan is how often the runner looks for service replicas to probe
// and reports changes of their readiness the market has not heard.
const probeScan = 500 * time.Millisecond

// tunnels is the node's tunnel service, service proxy, readiness prober
// and ingress.
type tunnels struct {
	n       *Node
	svc     *tunnel.Service
	proxy   *tunnel.Proxy
	prober  *tunnel.Prober
	ingress *api.Server
	wake    chan struct{} // a replica's readiness changed

	mu   sync.Mutex
	info map[attemptKey]attemptInfo // of the attempts running here
}

// attemptInfo is what the owner's signed spec says of an attempt running
// here.
type attemptInfo struct {
	owner   owner.ID
	service *market.ServiceSpec
}

// startTunnels starts the tunnel service, the prober's scan and, when
// ingress is not nil, the ingress.
func (n *Node) startTunnels(ingress net.Listener) error {
	t := &tunnels{n: n, info: map[attemptKey]attemptInfo{}, wake: make(chan struct{}, 1)}
	var err error
	t.svc, err = tunnel.New(tunnel.Config{Host: n.mesh.Host(), Network: n.mesh.Network(), Jobs: t, Logger: n.log})
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	t.proxy, err = tunnel.NewProxy(tunnel.ProxyConfig{Service: t.svc, Lookup: t.lookup, Logger: n.log})
	if err != nil {
		t.svc.Close()
		return fmt.Errorf("node: %w", err)
	}
	t.prober = tunnel.NewProber(tunnel.ProberConfig{Logger: n.log, OnChange: func(tunnel.ReplicaKey, bool) {
		select {
		case t.wake <- struct{}{}:
		default:
		}
	}})
	if ingress != nil {
		t.ingress = api.Serve(ingress, http.HandlerFunc(t.serveIngress))
		n.log.Info("ingress listening: public services at http://ADDR/JOB_ID/", "addr", t.ingress.Addr())
	}
	n.tun = t
	n.wg.Add(1)
	go t.scan()
	return nil
}

// close stops the ingress, cuts the tunnels and stops the probes.
func (t *tunnels) close() {
	if t.ingress != nil {
		t.ingress.Close()
	}
	t.svc.Close()
	t.proxy.Close()
	t.prober.Close()
}

// IngressAddr is the address the ingress listens on, "" when it does not.
func (n *Node) IngressAddr() string {
	if n.tun == nil || n.tun.ingress == nil {
		return ""
	}
	return n.tun.ingress.Addr()
}

// Target implements tunnel.Jobs: the attempt of the share running here.
func (t *tunnels) Target(ctx context.Context, job string, share int, epoch uint64) (tunnel.Target, error) {
	var run *executor.Run
	for _, r := range t.n.exec.Running() {
		a := r.Attempt()
		if a.JobID == job && a.Share == share && (epoch == 0 || a.Epoch == epoch) && (run == nil || a.Epoch > run.Attempt().Epoch) {
			run = r
		}
	}
	if run == nil {
		return tunnel.Target{}, tunnel.Errorf(http.StatusNotFound, "job %s share %d does not run on node %s", job, share, t.n.id.ShortString())
	}
	a := run.Attempt()
	key := attemptKey{a.JobID, a.Share, a.Epoch}
	info, err := t.attempt(ctx, key)
	if err != nil {
		return tunnel.Target{}, err
	}
	if info.owner == "" {
		return tunnel.Target{}, tunnel.Errorf(http.StatusForbidden, "job %s was not signed by an owner: nobody may reach into it", job)
	}
	tg := tunnel.Target{Attempt: run, Epoch: a.Epoch, Owner: info.owner}
	if s := info.service; s != nil {
		rk := tunnel.ReplicaKey{Job: job, Share: share, Epoch: a.Epoch}
		tg.Port, tg.Public, tg.Ready = s.Port, s.Public, func() bool { return t.prober.Ready(rk) }
	}
	return tg, nil
}

// attempt returns what the market holds of an attempt running here.
func (t *tunnels) attempt(ctx context.Context, key attemptKey) (attemptInfo, error) {
	t.mu.Lock()
	info, ok := t.info[key]
	t.mu.Unlock()
	if ok {
		return info, nil
	}
	found := false
	err := t.n.do(ctx, func() {
		for _, a := range t.n.mk.Attempts() {
			if a.Job == key.job && a.Share == key.share && a.Epoch == key.epoch {
				info, found = attemptInfo{owner: owner.ID(a.Owner), service: a.Service}, true
			}
		}
	})
	if err != nil {
		return info, tunnel.Errorf(http.StatusServiceUnavailable, "node %s is busy or stopping: %v", t.n.id.ShortString(), err)
	}
	if !found {
		return info, tunnel.Errorf(http.StatusNotFound, "job %s share %d epoch %d does not run on node %s", key.job, key.share, key.epoch, t.n.id.ShortString())
	}
	t.mu.Lock()
	t.info[key] = info
	t.mu.Unlock()
	return info, nil
}

// scan keeps the prober on the service replicas running here, forgets
// what it knew of attempts that ended, and tells the market each change
// of a replica's readiness (again, until the market has taken it).
func (t *tunnels) scan() {
	defer t.n.wg.Done()
	tick := time.NewTicker(probeScan)
	defer tick.Stop()
	told := map[tunnel.ReplicaKey]bool{}
	for {
		var replicas []tunnel.Replica
		live := map[attemptKey]bool{}
		for _, r := range t.n.exec.Running() {
			a := r.Attempt()
			key := attemptKey{a.JobID, a.Share, a.Epoch}
			live[key] = true
			info, err := t.attempt(t.n.ctx, key)
			if err != nil || info.service == nil || isDone(r) {
				continue
			}
			replicas = append(replicas, tunnel.Replica{Key: tunnel.ReplicaKey{Job: a.JobID, Share: a.Share, Epoch: a.Epoch},
				Attempt: r, Port: info.service.Port, Path: info.service.ReadyPath})
		}
		t.prober.Set(replicas)
		t.mu.Lock()
		for k := range t.info {
			if !live[k] {
				delete(t.info, k)
			}
		}
		t.mu.Unlock()
		now := map[tunnel.ReplicaKey]bool{}
		for _, r := range replicas {
			ready := t.prober.Ready(r.Key)
			now[r.Key] = ready
			if was, ok := told[r.Key]; ok && was == ready {
				continue
			}
			ev := market.ExecutionReady{Now: time.Now(), Job: r.Key.Job, Share: r.Key.Share, Epoch: r.Key.Epoch, Ready: ready}
			if t.n.post(func() { t.n.step(ev) }) {
				told[r.Key] = ready
			}
		}
		for k := range told {
			if _, ok := now[k]; !ok {
				delete(told, k)
			}
		}
		select {
		case <-t.n.ctx.Done():
			return
		case <-tick.C:
		case <-t.wake:
		}
	}
}

func isDone(r *executor.Run) bool {
	select {
	case <-r.Done():
		return true
	default:
		return false
	}
}

// lookup is the proxy's view of a service job: its record, from
// whichever member holds it.
func (t *tunnels) lookup(ctx context.Context, job string) (tunnel.Backend, error) {
	rec, err := t.n.Job(ctx, job)
	if err != nil {
		return tunnel.Backend{}, asTunnelError(err)
	}
	if rec.Spec.Service == nil {
		return tunnel.Backend{}, tunnel.Errorf(http.StatusConflict, "job %s is not a service with a port (submit it with --service --port PORT)", job)
	}
	if rec.State.Terminal() {
		return tunnel.Backend{}, tunnel.Errorf(http.StatusConflict, "service %s has ended (%s)", job, rec.State)
	}
	b := tunnel.Backend{Owner: owner.ID(rec.Spec.Owner), Public: rec.Spec.Service.Public, Port: rec.Spec.Service.Port}
	for _, p := range rec.Placements {
		if p.State != market.PlacementRunning || !p.Ready {
			continue
		}
		if id, err := peer.Decode(p.Node); err == nil {
			t.reachable(id)
			b.Ready = append(b.Ready, tunnel.Endpoint{Node: id, Share: p.Share, Epoch: p.Epoch})
		}
	}
	return b, nil
}

// reachable gives libp2p every address membership knows of a runner
// (Node.reachable).
func (t *tunnels) reachable(id peer.ID) { t.n.reachable(id) }

// serveIngress serves http://ADDR/JOB_ID/… of public services, to anyone.
func (t *tunnels) serveIngress(w http.ResponseWriter, r *http.Request) {
	job, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if market.ValidateJobID(job) != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintln(w, `{"error":"this is a gpumesh ingress: public services are at /JOB_ID/"}`)
		return
	}
	t.proxy.ServeHTTP(w, r, tunnel.ProxyRequest{Job: job, Path: "/" + rest})
}

// asTunnelError keeps an API error's status for the tunnel package.
func asTunnelError(err error) error {
	var he *api.HTTPError
	if errors.As(err, &he) {
		return &tunnel.Error{Status: he.Status, Field: he.Field, Msg: he.Err.Error()}
	}
	return err
}

// asHTTPError keeps a tunnel error's status for the API.
func asHTTPError(err error) error {
	var te *tunnel.Error
	if errors.As(err, &te) {
		return &api.HTTPError{Status: te.Status, Field: te.Field, Err: errors.New(te.Msg)}
	}
	return err
}

var _ api.Tunneler = tenantAPI{}

// OpenExec implements api.Tunneler.
func (t tenantAPI) OpenExec(ctx context.Context, job string, body []byte) (wire.HalfCloser, error) {
	var x wire.ExecRequest
	if err := strictJSON(body, &x); err != nil {
		return nil, api.Errorf(http.StatusBadRequest, "exec request: %v", err)
	}
	if err := tunnel.CheckExec(&x); err != nil {
		return nil, asHTTPError(err)
	}
	return t.open(ctx, tunnel.KindExec, job, x.Share, "/exec", body)
}

// OpenForward implements api.Tunneler.
func (t tenantAPI) OpenForward(ctx context.Context, job string, body []byte) (wire.HalfCloser, error) {
	var f wire.ForwardRequest
	if err := strictJSON(body, &f); err != nil {
		return nil, api.Errorf(http.StatusBadRequest, "forward request: %v", err)
	}
	if err := tunnel.CheckForward(&f); err != nil {
		return nil, asHTTPError(err)
	}
	return t.open(ctx, tunnel.KindForward, job, f.Share, "/forward", body)
}

// open checks that the caller owns the job and that the share runs, and
// opens the tunnel to the node that runs it.
func (t tenantAPI) open(ctx context.Context, kind tunnel.Kind, job string, share int, suffix string, body []byte) (wire.HalfCloser, error) {
	rec, err := t.own(ctx, job)
	if err != nil {
		return nil, err
	}
	p, err := runningShare(rec, share)
	if err != nil {
		return nil, err
	}
	to, err := peer.Decode(p.Node)
	if err != nil {
		return nil, api.Errorf(http.StatusBadGateway, "job %s share %d runs on a node with a bad ID %q", job, share, p.Node)
	}
	t.tun.reachable(to)
	proof := t.ownerProof(ctx, http.MethodPost, "/v1/jobs/"+job+suffix, body)
	c, _, err := t.tun.svc.Open(ctx, to, tunnel.Request{Kind: kind, Job: job, Share: share, Epoch: p.Epoch, Proof: &proof, Body: body})
	if err != nil {
		return nil, asHTTPError(err)
	}
	return c, nil
}

// runningShare is the running attempt of a share, or why there is none.
func runningShare(rec market.JobRecord, share int) (market.Placement, error) {
	if rec.State.Terminal() {
		return market.Placement{}, api.Errorf(http.StatusConflict, "job %s has ended (%s): nothing of it runs", rec.ID, rec.State)
	}
	p, ok := latestPlacement(rec, share)
	switch {
	case !ok && len(rec.Placements) == 0:
		return p, api.Errorf(http.StatusConflict, "job %s is not running: it has not been placed yet (%s)", rec.ID, rec.State)
	case !ok:
		all := shares(rec)
		slices.Sort(all)
		return p, &api.HTTPError{Status: http.StatusNotFound, Field: "share", Err: fmt.Errorf("job %s has no share %d (shares: %v)", rec.ID, share, all)}
	case p.State != market.PlacementRunning || p.StartedAt.IsZero():
		return p, api.Errorf(http.StatusConflict, "job %s share %d is not running (its latest attempt is %s; the job is %s)", rec.ID, share, p.State, rec.State)
	}
	return p, nil
}

// ownerProof is the owner's signed request for a tunnel: the one the API
// verified (its body is the one the API read), else one signed now with
// the key of an owner-token caller, else (in-process) with the node's own.
func (t tenantAPI) ownerProof(ctx context.Context, method, target string, body []byte) owner.Proof {
	c, ok := api.CallerFrom(ctx)
	if ok && c.Proof != nil {
		return *c.Proof
	}
	key := t.ownerKey
	if ok && c.Key != nil {
		key = *c.Key
	}
	return owner.SignRequest(key, method, target, body, time.Now())
}

// ServeService implements api.Tunneler: a request of the job's owner to
// one of its ready replicas.
func (t tenantAPI) ServeService(w http.ResponseWriter, r *http.Request, job, path string) {
	who, _ := callerOwner(r.Context()) // the API answered 403 without one
	proof := t.ownerProof(r.Context(), r.Method, r.URL.RequestURI(), nil)
	t.tun.proxy.ServeHTTP(w, r, tunnel.ProxyRequest{Job: job, Path: path, Caller: who, Proof: &proof})
}

// listenIngress opens the ingress's listener; a port another socket holds
// is an error naming its holder, as the API's is.
func listenIngress(addr string) (net.Listener, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("node: ingress address %q: want host:port, such as 0.0.0.0:8080", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("node: ingress %s: %w", addr, portuse.Explain("tcp", addr, err))
	}
	return ln, nil
}
