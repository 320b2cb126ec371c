package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/gossip"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/executor"
	"github.com/gpumesh/gpumesh/node/probe"
	"github.com/libp2p/go-libp2p/core/peer"
)

// rpcWireVersion is the version of the calls' JSON below (requests and
// replies). They travel in gossip envelopes (gossip.Version), and are read
// strictly: a field added to one is a new version, which the golden files
// under testdata/wire/ guard (wire_test.go). A call kind a peer does not
// know is answered with an error naming it.
const rpcWireVersion = 2

// The calls one node makes on another (gossip.Direct.Call kinds) and the
// kinds of their reply frames. Requests and replies are JSON.
const (
	kindSubmit   = "job.submit" // submitRequest → record
	kindGet      = "job.get"    // job ID (a JSON string) → record
	kindCancel   = "job.cancel" // job ID (a JSON string) → record
	kindScale    = "job.scale"  // scaleRequest → record
	kindLogs     = "job.logs"   // logsRequest → log chunks
	kindRecord   = "record"
	kindLogChunk = "log"
)

type submitRequest struct {
	Spec      market.JobSpec        `json:"spec"`
	Signature *market.SpecSignature `json:"signature,omitempty"` // the owner's (tenants.go)
	// Origin named the node that held a version 1 payload archive; read
	// and ignored since version 2, where the spec's payload names its
	// holder.
	Origin string `json:"origin,omitempty"`
}

type scaleRequest struct {
	Job   string `json:"job"`
	Cards int    `json:"cards"`
}

type logsRequest struct {
	Job    string `json:"job"`
	Share  int    `json:"share"`
	Epoch  uint64 `json:"epoch"`
	Stream string `json:"stream"`
	Offset int64  `json:"offset"`
	Follow bool   `json:"follow"`
}

// callError is how an API error crosses a call: its JSON is the error text.
type callError struct {
	Status int    `json:"status"`
	Field  string `json:"field,omitempty"`
	Error  string `json:"error"`
	// RetryAfterMs is the HTTPError's RetryAfter (a busy coordinator's
	// 429), in milliseconds; 0 when none.
	RetryAfterMs int64 `json:"retry_after_ms,omitempty"`
}

// asCallError encodes err for the caller, keeping an *api.HTTPError's
// status and field.
func asCallError(err error) error {
	ce := callError{Status: http.StatusInternalServerError, Error: err.Error()}
	var he *api.HTTPError
	if errors.As(err, &he) {
		ce.Status, ce.Field, ce.Error = he.Status, he.Field, he.Err.Error()
		ce.RetryAfterMs = he.RetryAfter.Milliseconds()
	}
	b, _ := json.Marshal(ce)
	return errors.New(string(b))
}

// fromCallError turns a call's error back into an *api.HTTPError where the
// peer sent one.
func fromCallError(err error) error {
	if !errors.Is(err, gossip.ErrRemote) {
		return err
	}
	msg := err.Error()
	i := strings.Index(msg, "{")
	if i < 0 {
		return err
	}
	var ce callError
	if json.Unmarshal([]byte(msg[i:]), &ce) != nil || ce.Status == 0 {
		return err
	}
	return &api.HTTPError{Status: ce.Status, Field: ce.Field, Err: errors.New(ce.Error), RetryAfter: time.Duration(ce.RetryAfterMs) * time.Millisecond}
}

func isNotFound(err error) bool {
	var he *api.HTTPError
	return errors.As(err, &he) && he.Status == http.StatusNotFound
}

// call makes a call whose reply is one JSON record.
func (n *Node) call(ctx context.Context, to peer.ID, kind string, req any) (market.JobRecord, error) {
	data, err := json.Marshal(req)
	if err != nil {
		return market.JobRecord{}, err
	}
	data = n.sealCall(ctx, kind, data, req) // an owner's call carries the owner's proof
	var rec market.JobRecord
	got := false
	n.dialable(to)
	err = n.direct.Ask(ctx, to, kind, data, func(m gossip.Message) error {
		if m.Kind != kindRecord || got {
			return fmt.Errorf("unexpected %q frame in a %s reply", m.Kind, kind)
		}
		got = true
		return json.Unmarshal(m.Data, &rec)
	})
	if err != nil {
		return market.JobRecord{}, fromCallError(err)
	}
	if !got {
		return market.JobRecord{}, fmt.Errorf("%s on %s: empty reply", kind, to.ShortString())
	}
	return rec, nil
}

// serveCall answers a peer's call.
func (n *Node) serveCall(ctx context.Context, req gossip.Message, reply func(string, []byte) error) error {
	if handled, err := n.guardCall(ctx, &req, reply); handled {
		return err // refused, or served: an owner's call without the owner's proof (tenants.go)
	}
	record := func(rec market.JobRecord, err error) error {
		if err != nil {
			return asCallError(err)
		}
		b, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		return reply(kindRecord, b)
	}
	switch req.Kind {
	case kindSubmit:
		var r submitRequest
		if err := strictJSON(req.Data, &r); err != nil {
			return asCallError(api.Errorf(http.StatusBadRequest, "submit: %v", err))
		}
		s := market.SignedSpec{Spec: r.Spec}
		if r.Signature != nil {
			s.Signature = *r.Signature
		}
		return record(n.submitLocal(ctx, s))
	case kindGet, kindCancel:
		var id string
		if err := strictJSON(req.Data, &id); err != nil {
			return asCallError(api.Errorf(http.StatusBadRequest, "%s: %v", req.Kind, err))
		}
		if req.Kind == kindGet {
			return record(n.localJob(ctx, id))
		}
		return record(n.cancelLocal(ctx, id))
	case kindScale:
		var r scaleRequest
		if err := strictJSON(req.Data, &r); err != nil {
			return asCallError(api.Errorf(http.StatusBadRequest, "scale: %v", err))
		}
		return record(n.scaleLocal(ctx, r.Job, r.Cards))
	case kindLogs:
		var r logsRequest
		if err := strictJSON(req.Data, &r); err != nil {
			return asCallError(api.Errorf(http.StatusBadRequest, "logs: %v", err))
		}
		name := attemptName(r.Job, r.Share, r.Epoch)
		err := n.localLogs(ctx, name, executor.Stream(r.Stream), r.Offset, r.Follow, func(b []byte) error {
			return reply(kindLogChunk, b)
		})
		if err != nil {
			return asCallError(err)
		}
		return nil
	case kindPayloadHold:
		var r payloadHold
		if err := strictJSON(req.Data, &r); err != nil {
			return asCallError(api.Errorf(http.StatusBadRequest, "%s: %v", req.Kind, err))
		}
		if err := n.serveHoldPayload(req.Sender, r); err != nil {
			return asCallError(err)
		}
		return reply(kindAck, nil)
	case kindCheckpointOffer, kindCheckpointHold, kindCheckpointHeld:
		return n.serveCheckpointCall(ctx, req, reply)
	case kindSecrets:
		var r secretsRequest
		if err := strictJSON(req.Data, &r); err != nil {
			return asCallError(api.Errorf(http.StatusBadRequest, "%s: %v", req.Kind, err))
		}
		if err := n.serveSecrets(ctx, req.Sender, r, reply); err != nil {
			return asCallError(err)
		}
		return nil
	case kindClaim, kindRelease:
		var r claimRequest
		if err := strictJSON(req.Data, &r); err != nil {
			return asCallError(api.Errorf(http.StatusBadRequest, "%s: %v", req.Kind, err))
		}
		if req.Kind == kindRelease {
			n.serveRelease(req.Sender, r)
			return reply(kindAck, nil)
		}
		out, err := n.serveClaim(ctx, req.Sender, r)
		if err != nil {
			return asCallError(err)
		}
		data, err := json.Marshal(out)
		if err != nil {
			return err
		}
		return reply(kindClaimed, data)
	case kindReplicate:
		top, err := n.serveReplicate(req.Sender, req.Data)
		if err != nil {
			return asCallError(err)
		}
		if top != nil {
			data, err := json.Marshal(top)
			if err != nil {
				return err
			}
			return reply(kindSuperseded, data)
		}
		return reply(kindAck, nil)
	case kindReplicateMany:
		return n.serveReplicateMany(req.Sender, req.Data, reply)
	case probe.KindChallenge:
		return n.serveProbe(ctx, req, reply)
	case kindReceipts:
		return n.serveReceipts(req, reply)
	}
	return fmt.Errorf("unknown call %q", req.Kind)
}

func strictJSON(b []byte, v any) error {
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}
