package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/gossip"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/owner"
	"github.com/gpumesh/gpumesh/mesh"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/jobstate"
	"github.com/libp2p/go-libp2p/core/peer"
)

// An owner's job list, from any node. A job's record lives on its
// coordinator and replicas, which rendezvous hashing picks among the
// coordinating members: a node that joined lately, or that the owner never
// submitted through, holds none of them. So the list is gathered: every
// coordinating member (standbys too, which hold records while coordinators
// are few) is asked at once for the records of the owner's jobs it holds,
// at most listParallel at a time and within listTimeout in all; copies of
// one job are folded to the newest (jobstate.Newer). Members that do not
// answer in time are named in the answer, whose jobs may then be missing.

// kindJobsList asks a member for the records of an owner's jobs it holds:
// the owner's signed GET /v1/jobs (sealed) → one record frame per job.
const kindJobsList = "jobs.list"

// The bounds of a gathered job list.
const (
	listTimeout  = 3 * time.Second
	listParallel = 8
)

// jobsListRequest is the call's data; the owner is the proof's.
type jobsListRequest struct{}

// ListJobs implements api.JobLister: the caller's jobs wherever they are
// coordinated, newest first.
func (t tenantAPI) ListJobs(ctx context.Context) (api.JobList, error) {
	who, err := callerOwner(ctx)
	if err != nil {
		return api.JobList{Jobs: []market.JobRecord{}}, nil // no owner: no jobs (the dashboard says why)
	}
	return t.ownerJobs(ctx, who), nil
}

// ownerJobs gathers who's jobs from this node and the coordinating members,
// then looks up the jobs submitted here that none of them returned.
func (n *Node) ownerJobs(ctx context.Context, who owner.ID) api.JobList {
	targets := n.listTargets()
	asked := append([]peer.ID{n.id}, targets...)
	list := gatherJobs(ctx, who, n.view.All(), targets, func(ctx context.Context, to peer.ID) ([]market.JobRecord, error) {
		return n.callJobsList(ctx, to)
	})
	list.Asked = len(asked)
	have := map[string]bool{}
	for _, rec := range list.Jobs {
		have[rec.ID] = true
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, listParallel)
	for _, id := range n.view.Remote() {
		if have[id] {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			gctx, cancel := context.WithTimeout(ctx, listTimeout)
			defer cancel()
			if rec, err := n.Job(gctx, id); err == nil && rec.Spec.Owner == string(who) {
				mu.Lock()
				list.Jobs = append(list.Jobs, rec)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	jobstate.SortJobs(list.Jobs)
	return list
}

// gatherJobs folds who's records among held with those each target returns
// through call, asking at most listParallel targets at once, each within
// listTimeout of the start. A target that fails or does not answer in time
// is named in Unanswered (in targets' order).
func gatherJobs(ctx context.Context, who owner.ID, held []market.JobRecord, targets []peer.ID,
	call func(context.Context, peer.ID) ([]market.JobRecord, error)) api.JobList {
	byID := map[string]market.JobRecord{}
	add := func(rec market.JobRecord) {
		if rec.Spec.Owner != string(who) {
			return // a peer's answer is checked too
		}
		if old, ok := byID[rec.ID]; ok && !jobstate.Newer(rec, old) {
			return
		}
		byID[rec.ID] = rec
	}
	for _, rec := range held {
		add(rec)
	}
	gctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	type answer struct {
		recs []market.JobRecord
		err  error
	}
	answers := make([]answer, len(targets))
	var wg sync.WaitGroup
	sem := make(chan struct{}, listParallel)
	for i, to := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-gctx.Done():
				answers[i].err = gctx.Err()
				return
			}
			defer func() { <-sem }()
			recs, err := call(gctx, to)
			answers[i] = answer{recs, err}
		}()
	}
	wg.Wait()
	list := api.JobList{Jobs: []market.JobRecord{}}
	for i, a := range answers {
		if a.err != nil {
			list.Unanswered = append(list.Unanswered, targets[i].String())
			continue
		}
		for _, rec := range a.recs {
			add(rec)
		}
	}
	for _, rec := range byID {
		list.Jobs = append(list.Jobs, rec)
	}
	jobstate.SortJobs(list.Jobs)
	return list
}

// listTargets are the members other than this node that may hold job
// records: the alive and suspect members that coordinate or stand by, or,
// in a mesh where none does, every alive or suspect member (see
// coordinators).
func (n *Node) listTargets() []peer.ID {
	var holders, live []peer.ID
	for _, m := range n.mesh.Members() {
		if m.Self || (m.State != mesh.StateAlive && m.State != mesh.StateSuspect) {
			continue
		}
		live = append(live, m.ID)
		if r := n.roleOf(m); r == roleCoordinator || r == roleStandby {
			holders = append(holders, m.ID)
		}
	}
	if len(holders) == 0 {
		holders = live
	}
	slices.Sort(holders)
	return holders
}

// callJobsList asks one member for the caller's jobs it holds.
func (n *Node) callJobsList(ctx context.Context, to peer.ID) ([]market.JobRecord, error) {
	data := n.sealCall(ctx, kindJobsList, []byte("{}"), jobsListRequest{})
	n.dialable(to)
	var recs []market.JobRecord
	err := n.direct.Call(ctx, to, kindJobsList, data, func(m gossip.Message) error {
		if m.Kind != kindRecord {
			return fmt.Errorf("unexpected %q frame in a %s reply", m.Kind, kindJobsList)
		}
		var rec market.JobRecord
		if err := json.Unmarshal(m.Data, &rec); err != nil {
			return err
		}
		recs = append(recs, rec)
		return nil
	})
	if err != nil {
		return nil, fromCallError(err)
	}
	return recs, nil
}

// serveJobsList answers kindJobsList: the records of the proof's owner's
// jobs this node holds, one frame each. The proof must be the owner's
// signed GET /v1/jobs.
func (n *Node) serveJobsList(sc *sealedCall, reply func(string, []byte) error) error {
	p := &sc.Proof
	if err := p.Verify(time.Now(), owner.RequestWindow); err != nil {
		return asCallError(api.Errorf(http.StatusUnauthorized, "%s: the owner's signed request: %v", kindJobsList, err))
	}
	if p.Method != http.MethodGet || p.Path() != "/v1/jobs" {
		return asCallError(api.Errorf(http.StatusUnauthorized, "%s: the owner signed %s %s, not GET /v1/jobs", kindJobsList, p.Method, p.Path()))
	}
	for _, rec := range n.view.All() {
		if rec.Spec.Owner != string(p.Owner) {
			continue
		}
		b, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		if err := reply(kindRecord, b); err != nil {
			return err
		}
	}
	return nil
}
