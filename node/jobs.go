package node

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/internal/text"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/mesh"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/blob"
	"github.com/gpumesh/gpumesh/node/jobstate"
	"github.com/libp2p/go-libp2p/core/peer"
)

// callTimeout bounds a call to another node on behalf of an API request.
// getTimeout bounds a read of a job's record from its coordinator: one cut
// off by a partition holds its connections open without answering, and a
// read should go on to the successor rather than wait the full
// callTimeout.
const (
	callTimeout = 10 * time.Second
	getTimeout  = 2 * time.Second
)

// coordinators returns the members that should hold a job, best first:
// rendezvous hashing (market.Coordinators) over the coordinator-eligible
// alive members. Eligible are the members whose metadata says they
// coordinate (see CoordinatorMode). While fewer than r are, the list goes
// on with the standbys (auto members not yet members for CoordinatorAfter),
// by rendezvous hashing too: in a mesh whose nodes have all restarted
// lately, the one node up long enough must not hold every record alone.
// While no member is either (a mesh of CoordinatorNever nodes), every
// alive member is eligible. Every node computes the same list from the
// same membership, so "submit anywhere, ask anywhere" needs no directory.
func (n *Node) coordinators(job string, r int) []peer.ID {
	var eligible, standby, alive []string
	for _, m := range n.mesh.Members() {
		if m.State != mesh.StateAlive {
			continue
		}
		alive = append(alive, m.Name)
		switch n.roleOf(m) {
		case roleCoordinator:
			eligible = append(eligible, m.Name)
		case roleStandby:
			standby = append(standby, m.Name)
		}
	}
	if len(eligible) == 0 && len(standby) == 0 {
		eligible = alive
	}
	if len(eligible) == 0 && len(standby) == 0 {
		eligible = []string{n.self}
	}
	ids := market.Coordinators(job, eligible, r)
	if len(ids) < r && len(standby) > 0 {
		ids = append(ids, market.Coordinators(job, standby, r-len(ids))...)
	}
	out := make([]peer.ID, 0, len(ids))
	for _, s := range ids {
		if id, err := peer.Decode(s); err == nil {
			out = append(out, id)
		}
	}
	return out
}

// Submit implements api.Backend for in-process callers: it checks the spec,
// signs it with the node's owner key (Config.Owner), then hands it to the
// job's coordinator (this node, or the first of the HRW list that answers)
// and returns the record the coordinator acknowledged. The API submits
// through tenantAPI, for the owner of each request.
func (n *Node) Submit(ctx context.Context, spec market.JobSpec) (market.JobRecord, error) {
	if err := completeSpec(&spec); err != nil {
		return market.JobRecord{}, err
	}
	signed, err := n.signAsNode(spec)
	if err != nil {
		return market.JobRecord{}, err
	}
	return n.submitSigned(ctx, signed)
}

// submitSigned hands an owner's signed spec to the job's coordinator.
func (n *Node) submitSigned(ctx context.Context, signed market.SignedSpec) (market.JobRecord, error) {
	spec := signed.Spec
	if err := checkSpec(&spec); err != nil {
		return market.JobRecord{}, err
	}
	if err := n.checkSubmission(&signed, time.Now()); err != nil {
		return market.JobRecord{}, err
	}
	var payload blob.Digest
	if spec.Payload != nil {
		var err error
		if payload, err = n.keepPayload(&spec); err != nil {
			return market.JobRecord{}, err
		}
	}
	if spec.Data != nil && spec.Data.Secrets != nil {
		if err := n.keepSecrets(&spec); err != nil {
			return market.JobRecord{}, err
		}
	}
	n.view.AddSubmitted(spec.ID, time.Now())
	var lastErr error
	for _, c := range n.coordinators(spec.ID, n.cfg.Replicas) {
		if c == n.id {
			return n.submitLocal(ctx, signed)
		}
		var he *api.HTTPError
		if spec.Payload != nil {
			// The coordinator holds the payload before it takes the job.
			if err := n.handPayload(ctx, c, signed, payload); err != nil {
				if err = fromCallError(err); errors.As(err, &he) {
					return market.JobRecord{}, err
				}
				n.log.Warn("coordinator did not take the payload; trying the next", "job", spec.ID, "coordinator", c.ShortString(), "err", err)
				lastErr = err
				continue
			}
		}
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		rec, err := n.call(cctx, c, kindSubmit, submitRequest{Spec: spec, Signature: &signed.Signature})
		cancel()
		if err == nil || errors.As(err, &he) {
			return rec, err // an answer, even a refusal, ends the search
		}
		n.log.Warn("coordinator unreachable; trying the next", "job", spec.ID, "coordinator", c.ShortString(), "err", err)
		lastErr = err
	}
	return market.JobRecord{}, api.Errorf(http.StatusServiceUnavailable, "no coordinator reachable for job %s: %v", spec.ID, lastErr)
}

func newJobID() (string, error) {
	b := make([]byte, market.JobIDRandomBytes)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return market.NewJobID(b)
}

// checkSpec validates a spec and maps a bad field to a 400.
func checkSpec(spec *market.JobSpec) error {
	return specError(spec.Validate(nil))
}

// completeSpec fills in what an unsigned spec, which this node is about to
// sign, may leave out: a job ID, and the max price (market.FillMaxPrice,
// as gpumesh submit does). Then it checks the spec.
func completeSpec(spec *market.JobSpec) error {
	if spec.ID == "" {
		id, err := newJobID()
		if err != nil {
			return err
		}
		spec.ID = id
	}
	if _, err := spec.FillMaxPrice(nil); err != nil {
		return specError(err)
	}
	return checkSpec(spec)
}

// specError maps a spec's validation error to a 400 naming its field.
func specError(err error) error {
	if err == nil {
		return nil
	}
	var se *market.SpecError
	if errors.As(err, &se) {
		return &api.HTTPError{Status: http.StatusBadRequest, Field: se.Field, Err: err}
	}
	return &api.HTTPError{Status: http.StatusBadRequest, Err: err}
}

// submitLocal makes this node the job's coordinator. The owner's signature
// is checked, the payload held here (handed over first), and the record is
// on disk before the call returns.
func (n *Node) submitLocal(ctx context.Context, signed market.SignedSpec) (market.JobRecord, error) {
	spec := signed.Spec
	if err := checkSpec(&spec); err != nil {
		return market.JobRecord{}, err
	}
	release, err := n.admit(spec.ID)
	if err != nil {
		return market.JobRecord{}, err
	}
	defer release()
	n.stages.Received(spec.ID, time.Now())
	if err := n.checkSubmission(&signed, time.Now()); err != nil {
		return market.JobRecord{}, err
	}
	if spec.Payload != nil {
		if err := n.checkHeldPayload(&spec); err != nil {
			return market.JobRecord{}, err
		}
	}
	if t, gone := n.view.Dropped(spec.ID); gone {
		return market.JobRecord{}, droppedJob(t)
	}
	if held, ok := n.view.Job(spec.ID); ok && held.Coordinator != n.self {
		// Another node coordinates the job (this one holds its replica, or
		// let it go): a submission retried after a 503 that finds a new
		// first member of the job's list, its coordinator of the first try
		// having become unreachable meanwhile. Creating the job again here
		// would give it two coordinators of one term, handing out the same
		// epochs.
		if !reflect.DeepEqual(held.Spec, spec) {
			return market.JobRecord{}, api.Errorf(http.StatusConflict, "job %s exists with another spec", spec.ID)
		}
		n.log.Info("job already coordinated elsewhere; answering with its record", "job", spec.ID, "coordinator", held.Coordinator)
		return held, nil
	}
	var rec market.JobRecord
	var stepErr error
	n.stages.Queued(spec.ID, time.Now())
	err = n.doDurable(ctx, func() {
		now := time.Now()
		n.stages.Stepped(spec.ID, now)
		if t, gone := n.view.Dropped(spec.ID); gone { // dropped since the check above (on the driver, as here)
			stepErr = droppedJob(t)
			return
		}
		stepErr = n.mk.Step(market.JobSubmitted{Now: now, Spec: spec, Signature: &signed.Signature})
	}, func() { // persisted before the acknowledgement leaves, with the turn's other submissions
		n.stages.Persisted(spec.ID, time.Now())
		rec, _ = n.mk.Job(spec.ID)
	})
	if err != nil {
		return market.JobRecord{}, err
	}
	switch {
	case isHTTPError(stepErr):
		return market.JobRecord{}, stepErr
	case errors.Is(stepErr, market.ErrJobExists):
		// A retried submission of the same spec is acknowledged again.
		if !reflect.DeepEqual(rec.Spec, spec) {
			return market.JobRecord{}, api.Errorf(http.StatusConflict, "job %s exists with another spec", spec.ID)
		}
	case stepErr != nil:
		var se *market.SpecError
		if errors.As(stepErr, &se) {
			return market.JobRecord{}, &api.HTTPError{Status: http.StatusBadRequest, Field: se.Field, Err: stepErr}
		}
		return market.JobRecord{}, api.Errorf(http.StatusBadRequest, "job %s: %v", spec.ID, stepErr)
	}
	// The record reaches its replicas before the acknowledgement leaves:
	// what is acknowledged survives the loss of this node.
	if err := n.durable(ctx, rec, "submission", "submit it again with the same ID"); err != nil {
		return market.JobRecord{}, err
	}
	n.stages.Replicated(spec.ID, time.Now())
	n.log.Info("job accepted", "job", spec.ID, "cards", spec.Cards)
	return rec, nil
}

// Job implements api.Backend.
func (n *Node) Job(ctx context.Context, id string) (market.JobRecord, error) {
	if err := market.ValidateJobID(id); err != nil {
		return market.JobRecord{}, api.Errorf(http.StatusBadRequest, "job id %q: %v", id, err)
	}
	return n.routed(ctx, id, kindGet, id, n.localJob)
}

// routed runs a job operation on the job's coordinator: this node if it
// coordinates the job; otherwise the coordinator named by the record this
// node holds, or by the first of the job's HRW members that knows the job.
// If the named coordinator cannot be reached, the job's HRW members are
// tried in order (a successor may have taken the job over).
func (n *Node) routed(ctx context.Context, id, kind string, req any, local func(context.Context, string) (market.JobRecord, error)) (market.JobRecord, error) {
	if rec, ok := n.view.Job(id); ok && rec.Coordinator == n.self && !rec.State.Terminal() {
		return local(ctx, id)
	}
	tried := map[peer.ID]bool{}
	var lastErr error
	var answer error // a coordinator's answer that is not the record: the caller's
	try := func(c peer.ID) (market.JobRecord, bool) {
		if tried[c] || answer != nil {
			return market.JobRecord{}, false
		}
		tried[c] = true
		if c == n.id {
			rec, err := local(ctx, id)
			if err != nil && !isNotFound(err) {
				lastErr = err
			}
			if isAnswer(err) {
				answer = err
			}
			return rec, err == nil
		}
		if m, ok := n.mesh.Member(c); ok && (m.State == mesh.StateDead || m.State == mesh.StateLeft) {
			// Membership is a hint, not the authority (DESIGN.md), but
			// a call to a member it declared dead would only wait out
			// its timeout: the next member of the list answers instead.
			lastErr = fmt.Errorf("%s is %s", c.ShortString(), m.State)
			return market.JobRecord{}, false
		}
		timeout := callTimeout
		if kind == kindGet {
			timeout = getTimeout
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		rec, err := n.call(cctx, c, kind, req)
		if err != nil {
			if !isNotFound(err) {
				lastErr = err
			}
			if isAnswer(err) {
				answer = err
			}
			return rec, false
		}
		return rec, true
	}
	// Who coordinates it? Our own copy says, or a member of its HRW list.
	coord := ""
	if rec, ok := n.view.Job(id); ok {
		coord = rec.Coordinator
	}
	var fromReplica market.JobRecord
	if coord == "" {
		for _, c := range n.coordinators(id, n.cfg.Replicas+1) {
			if c == n.id {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, callTimeout)
			rec, err := n.call(cctx, c, kindGet, id)
			cancel()
			if err == nil {
				coord, fromReplica = rec.Coordinator, rec
				if kind == kindGet && rec.Coordinator == c.String() {
					return rec, nil // the coordinator answered itself
				}
				break
			}
		}
	}
	if pid, err := peer.Decode(coord); err == nil {
		if rec, ok := try(pid); ok {
			return rec, nil
		}
	}
	for _, c := range n.coordinators(id, n.cfg.Replicas+1) {
		if rec, ok := try(c); ok {
			return rec, nil
		}
	}
	if answer != nil {
		return market.JobRecord{}, answer // the coordinator refused: say so as it did
	}
	if kind == kindGet {
		if rec, ok := n.view.Job(id); ok {
			return rec, nil // this node's last copy: better than nothing
		}
		if fromReplica.ID != "" {
			return fromReplica, nil
		}
	}
	if refusedOwner(lastErr) {
		return market.JobRecord{}, lastErr // the owner check refused it (tenants.go)
	}
	if lastErr != nil {
		return market.JobRecord{}, api.Errorf(http.StatusServiceUnavailable, "job %s: its coordinator did not answer: %v", id, lastErr)
	}
	return market.JobRecord{}, api.Errorf(http.StatusNotFound, "no job %s", id)
}

// isAnswer reports whether err is a node's definite answer to a job
// request: it refused the request for what it asked (4xx other than 404:
// out of the job's elastic range, the job has ended, another owner's job),
// which no other node would answer otherwise. A 404 (the node does not hold
// the job), a 5xx or no answer sends the request on to the next member.
func isAnswer(err error) bool {
	var he *api.HTTPError
	return errors.As(err, &he) && he.Status >= 400 && he.Status < 500 && he.Status != http.StatusNotFound
}

// localJob answers with this node's record of the job as written to its
// disk (the view): of a job it coordinates, of a replica it holds, or its
// last record of a job that ended or moved. The market's own record can be
// a driver turn ahead of the disk (the persister writes after the turn); a
// coordinator killed in between would come back without a change its owner
// had already seen, such as a bill that had grown. Every change an owner
// is answered for (a submission, a cancel, a scale) is written before the
// answer, so reading what is written never hides one.
func (n *Node) localJob(_ context.Context, id string) (market.JobRecord, error) {
	if held, found := n.view.Job(id); found {
		return held, nil
	}
	return market.JobRecord{}, api.Errorf(http.StatusNotFound, "no job %s", id)
}

// ownRecord returns this node's newest record of a job it coordinates: as
// decided, or as written (the view).
func (n *Node) ownRecord(job string) (market.JobRecord, bool) {
	if rec, ok := n.decided.Own(job); ok {
		return rec, true
	}
	rec, ok := n.view.Job(job)
	return rec, ok && rec.Coordinator == n.self
}

// Jobs implements api.Backend: the jobs this node coordinates and those
// submitted through it, newest first.
func (n *Node) Jobs(ctx context.Context) ([]market.JobRecord, error) {
	recs := n.view.All()
	remote := n.view.Remote()
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, id := range remote {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if rec, err := n.Job(ctx, id); err == nil {
				mu.Lock()
				recs = append(recs, rec)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	jobstate.SortJobs(recs)
	return recs, nil
}

// Cancel implements api.Backend.
func (n *Node) Cancel(ctx context.Context, id string) (market.JobRecord, error) {
	if err := market.ValidateJobID(id); err != nil {
		return market.JobRecord{}, api.Errorf(http.StatusBadRequest, "job id %q: %v", id, err)
	}
	return n.routed(ctx, id, kindCancel, id, n.cancelLocal)
}

// stepJob steps the market, on the driver goroutine, with the event ev
// makes (made there, so its Now is the moment it is applied) for a job this
// node holds, and returns the job's record after it. found is false, and
// nothing is stepped, when the node holds no such job; stepErr is the
// market's answer; err is the driver's (ctx ended, node closing).
func (n *Node) stepJob(ctx context.Context, id string, ev func() market.Event) (rec market.JobRecord, found bool, stepErr, err error) {
	err = n.do(ctx, func() {
		if _, found = n.mk.Job(id); !found {
			return
		}
		stepErr = n.mk.Step(ev())
		n.drain()
		rec, _ = n.mk.Job(id)
	})
	return rec, found, stepErr, err
}

func (n *Node) cancelLocal(ctx context.Context, id string) (market.JobRecord, error) {
	rec, ok, stepErr, err := n.stepJob(ctx, id, func() market.Event {
		return market.CancelJob{Now: time.Now(), Job: id, Reason: "cancelled by its owner"}
	})
	switch {
	case err != nil:
		return rec, err
	case !ok:
		if held, found := n.view.Job(id); found && jobstate.Ended(held) {
			return held, nil // it ended: cancelling it again changes nothing
		}
		return rec, api.Errorf(http.StatusNotFound, "no job %s", id)
	case stepErr != nil && !errors.Is(stepErr, market.ErrJobEnded):
		return rec, api.Errorf(http.StatusConflict, "job %s: %v", id, stepErr)
	}
	return rec, n.durable(ctx, rec, "cancel", "cancel it again")
}

// durable waits until the replicas of rec's job hold rec before a change
// the owner asked for (a cancel, a scale) is acknowledged: a successor
// adopts the record from them, and an acknowledged cancel that only this
// node held would be undone by its loss, the job running on. The answer
// when they do not confirm in time is a 503 that says what to do: the
// request is idempotent, and the replicate loop goes on meanwhile.
func (n *Node) durable(ctx context.Context, rec market.JobRecord, what, retry string) error {
	missing := n.replicateForAck(ctx, rec)
	if len(missing) == 0 {
		return nil
	}
	n.repl.Missed(rec.ID)
	names := make([]string, len(missing))
	for i, id := range missing {
		names[i] = id.ShortString()
	}
	n.log.Warn("change not acknowledged: replicas did not confirm the record", "job", rec.ID, "change", what, "missing", names)
	return api.Errorf(http.StatusServiceUnavailable,
		"job %s: %d of its %s (%s) did not confirm the %s within %v; it may have taken effect: %s",
		rec.ID, len(missing), text.Count(len(n.replicaTargets(rec.ID)), "replica"), strings.Join(names, ", "), what, replicaAckWait, retry)
}

// Scale implements api.Backend.
func (n *Node) Scale(ctx context.Context, id string, cards int) (market.JobRecord, error) {
	if err := market.ValidateJobID(id); err != nil {
		return market.JobRecord{}, api.Errorf(http.StatusBadRequest, "job id %q: %v", id, err)
	}
	return n.routed(ctx, id, kindScale, scaleRequest{Job: id, Cards: cards}, func(ctx context.Context, id string) (market.JobRecord, error) {
		return n.scaleLocal(ctx, id, cards)
	})
}

func (n *Node) scaleLocal(ctx context.Context, id string, cards int) (market.JobRecord, error) {
	rec, ok, stepErr, err := n.stepJob(ctx, id, func() market.Event {
		return market.ScaleJob{Now: time.Now(), Job: id, Cards: cards}
	})
	switch {
	case err != nil:
		return rec, err
	case !ok:
		if held, found := n.view.Job(id); found && jobstate.Ended(held) {
			return held, endedConflict(held, "scaled")
		}
		return rec, api.Errorf(http.StatusNotFound, "no job %s", id)
	case errors.Is(stepErr, market.ErrNotElastic):
		return rec, &api.HTTPError{Status: http.StatusBadRequest, Field: "cards", Err: stepErr}
	case errors.Is(stepErr, market.ErrJobEnded):
		return rec, endedConflict(rec, "scaled")
	case stepErr != nil:
		return rec, api.Errorf(http.StatusConflict, "job %s: %v", id, stepErr)
	}
	return rec, n.durable(ctx, rec, "scale", "scale it again")
}

// endedConflict is the 409 for a request an ended job cannot take: "job
// j1 has ended (succeeded): it cannot be scaled".
func endedConflict(rec market.JobRecord, what string) error {
	return api.Errorf(http.StatusConflict, "job %s has ended (%s): it cannot be %s", rec.ID, rec.State, what)
}

// latestPlacement is the attempt of a share to read logs from: the one
// running now, else the one with the highest epoch.
func latestPlacement(rec market.JobRecord, share int) (market.Placement, bool) {
	var best market.Placement
	found := false
	for _, p := range rec.Placements {
		if p.Share != share || p.State == market.PlacementRejected {
			continue
		}
		if !found || p.Epoch > best.Epoch {
			best, found = p, true
		}
	}
	return best, found
}

// shares lists the share numbers of a record.
func shares(rec market.JobRecord) []int {
	var out []int
	for _, p := range rec.Placements {
		if !slices.Contains(out, p.Share) {
			out = append(out, p.Share)
		}
	}
	slices.Sort(out)
	return out
}

// droppedJob refuses a submission of a job whose record was dropped: it
// ended, and running it again under the same ID would break the promise
// that an ID runs once.
func droppedJob(t jobstate.Tombstone) error {
	return api.Errorf(http.StatusConflict, "job %s ended (%s) at %s and its record was dropped after --keep-jobs: submit it with a new ID",
		t.ID, t.State, t.EndedAt.UTC().Format(time.RFC3339))
}
