package client

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
)

// Submit hands spec to the node (POST /v1/jobs) and returns the job's record
// once its coordinator has acknowledged it. Submitting the same spec.ID again
// is how a caller retries safely after an error whose outcome is unknown.
//
// With an owner key (WithOwnerKey) the spec is signed for the node's mesh
// (asked once with Info) and its Owner set to the key's. A spec without an
// ID gets a new random one first, signed or not, so that a submission sent
// again is the same job. Without a key the spec goes unsigned, which a node
// takes only from an owner token.
//
// A node that answers 429 (saturated) or 503 (its coordinator or the job's
// replicas did not answer in time) gets the same submission again, for at
// most DefaultSubmitRetry (WithSubmitRetry): the job starts once whatever
// the first tries did.
func (c *Client) Submit(ctx context.Context, spec market.JobSpec) (market.JobRecord, error) {
	if spec.ID == "" {
		id, err := newJobID()
		if err != nil {
			return market.JobRecord{}, err
		}
		spec.ID = id
	}
	var v any = spec
	if c.key != nil {
		signed, err := c.Sign(ctx, spec)
		if err != nil {
			return market.JobRecord{}, err
		}
		v = signed
	}
	body, err := jsonBody(v)
	if err != nil {
		return market.JobRecord{}, err
	}
	var rec market.JobRecord
	err = c.withRetry(ctx, spec.ID, func() error {
		return c.call(ctx, request{method: http.MethodPost, path: "/v1/jobs", body: body}, &rec)
	})
	return rec, err
}

// newJobID makes a random job ID.
func newJobID() (string, error) {
	b := make([]byte, market.JobIDRandomBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("client: making a job ID: %w", err)
	}
	return market.NewJobID(b)
}

// Sign signs spec with the client's owner key for the node's mesh, giving
// it a new random ID first if it has none.
func (c *Client) Sign(ctx context.Context, spec market.JobSpec) (market.SignedSpec, error) {
	if c.key == nil {
		return market.SignedSpec{}, errors.New("client: signing a spec needs an owner key (WithOwnerKey)")
	}
	if spec.ID == "" {
		id, err := newJobID()
		if err != nil {
			return market.SignedSpec{}, err
		}
		spec.ID = id
	}
	network, err := c.network(ctx)
	if err != nil {
		return market.SignedSpec{}, err
	}
	signed, err := market.SignSpec(*c.key, network, spec, c.now())
	if err != nil {
		return market.SignedSpec{}, fmt.Errorf("client: %w", err)
	}
	return signed, nil
}

// Info returns what the node says a client needs before it signs (GET
// /v1/info): its mesh's name, and the owner the request authenticated as.
func (c *Client) Info(ctx context.Context) (api.Info, error) {
	var info api.Info
	err := c.call(ctx, request{method: http.MethodGet, path: "/v1/info"}, &info)
	return info, err
}

// network is the node's mesh name, asked once.
func (c *Client) network(ctx context.Context) (string, error) {
	c.netMu.Lock()
	defer c.netMu.Unlock()
	if c.meshName != nil {
		return *c.meshName, nil
	}
	info, err := c.Info(ctx)
	if err != nil {
		return "", err
	}
	c.meshName = &info.Network
	return info.Network, nil
}

// Jobs lists the caller's jobs (GET /v1/jobs), in the node's order.
func (c *Client) Jobs(ctx context.Context) ([]market.JobRecord, error) {
	list, err := c.JobList(ctx)
	return list.Jobs, err
}

// JobList is Jobs with what the node says of the list: how many nodes it
// asked, and which did not answer (their jobs may be missing).
func (c *Client) JobList(ctx context.Context) (api.JobList, error) {
	var list api.JobList
	err := c.call(ctx, request{method: http.MethodGet, path: "/v1/jobs"}, &list)
	return list, err
}

// Job returns a job's record (GET /v1/jobs/{id}); an unknown job is an
// *APIError matching ErrNotFound.
func (c *Client) Job(ctx context.Context, id string) (market.JobRecord, error) {
	var rec market.JobRecord
	err := c.call(ctx, request{method: http.MethodGet, path: jobPath(id)}, &rec)
	return rec, err
}

// Cancel cancels a job (DELETE /v1/jobs/{id}) and returns its record after.
func (c *Client) Cancel(ctx context.Context, id string) (market.JobRecord, error) {
	var rec market.JobRecord
	err := c.call(ctx, request{method: http.MethodDelete, path: jobPath(id)}, &rec)
	return rec, err
}

// Scale asks an elastic job to hold cards cards (POST /v1/jobs/{id}/scale)
// and returns its record after.
func (c *Client) Scale(ctx context.Context, id string, cards int) (market.JobRecord, error) {
	body, err := jsonBody(api.ScaleRequest{Cards: cards})
	if err != nil {
		return market.JobRecord{}, err
	}
	var rec market.JobRecord
	err = c.call(ctx, request{method: http.MethodPost, path: jobPath(id, "/scale"), body: body}, &rec)
	return rec, err
}

// Defaults of WaitOptions.
const (
	DefaultWaitMinInterval = 100 * time.Millisecond
	DefaultWaitMaxInterval = 2 * time.Second
	DefaultWaitPatience    = time.Minute
)

// WaitOptions tunes Wait. Zero values mean the defaults.
type WaitOptions struct {
	// MinInterval is the first pause between polls (default
	// DefaultWaitMinInterval); each pause is 1.5 times the last, up to
	// MaxInterval (default DefaultWaitMaxInterval). A change of state
	// brings the pause back to MinInterval.
	MinInterval, MaxInterval time.Duration
	// Patience is how long Wait keeps polling through a node that cannot be
	// reached or answers with a server error (5xx), counted from the first
	// such failure in a row (default DefaultWaitPatience). Any other error
	// ends Wait at once.
	Patience time.Duration
	// OnChange, when not nil, is called with the first record and with
	// every record whose state, epoch or reason differs from the one
	// before (a pending job's reason says what it waits for).
	OnChange func(market.JobRecord)
}

// Wait polls a job (GET /v1/jobs/{id}) until it is in a terminal state
// (succeeded, failed, cancelled) and returns that record. When ctx ends
// first, it returns the last record seen and an error wrapping ctx.Err().
func (c *Client) Wait(ctx context.Context, id string, o WaitOptions) (market.JobRecord, error) {
	return c.WaitUntil(ctx, id, o, func(rec market.JobRecord) bool { return rec.State.Terminal() })
}

// WaitUntil polls a job as Wait does until done returns true for its record
// (or the job is terminal: it cannot change any more), and returns that
// record. It is how a caller waits for a job to run, or for a share to be
// placed.
func (c *Client) WaitUntil(ctx context.Context, id string, o WaitOptions, done func(market.JobRecord) bool) (market.JobRecord, error) {
	if o.MinInterval <= 0 {
		o.MinInterval = DefaultWaitMinInterval
	}
	if o.MaxInterval <= 0 {
		o.MaxInterval = DefaultWaitMaxInterval
	}
	o.MaxInterval = max(o.MaxInterval, o.MinInterval)
	if o.Patience <= 0 {
		o.Patience = DefaultWaitPatience
	}
	var (
		last      market.JobRecord
		seen      bool
		failSince time.Time
		pause     = o.MinInterval
	)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return last, fmt.Errorf("waiting for job %s: %w", id, ctx.Err())
		case <-timer.C:
		}
		rec, err := c.Job(ctx, id)
		switch {
		case err == nil:
			failSince = time.Time{}
			if !seen || rec.State != last.State || rec.Epoch != last.Epoch || rec.Reason != last.Reason {
				pause = o.MinInterval
				if o.OnChange != nil {
					o.OnChange(rec)
				}
			}
			last, seen = rec, true
			if done(rec) || rec.State.Terminal() {
				return rec, nil
			}
		case ctx.Err() != nil:
			return last, fmt.Errorf("waiting for job %s: %w", id, ctx.Err())
		case transient(err):
			if failSince.IsZero() {
				failSince = time.Now()
			} else if time.Since(failSince) > o.Patience {
				return last, fmt.Errorf("waiting for job %s: gave up after %v of failures: %w", id, o.Patience, err)
			}
		default:
			return last, fmt.Errorf("waiting for job %s: %w", id, err)
		}
		timer.Reset(pause)
		pause = min(pause*3/2, o.MaxInterval)
	}
}

// transient reports whether err may pass by itself: the node is not
// reachable, answered 5xx, or the exchange broke off.
func transient(err error) bool {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status >= 500
	}
	return true
}
