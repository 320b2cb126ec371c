package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/gpumesh/gpumesh/gossip"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/jobstate"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Replication in batches. The records of several jobs that go to the same
// replica go in one call, kindReplicateMany: a JSON array of records, and
// one answer frame for each, in order — kindAck, kindSuperseded with the
// record that outranks it, or kindRefused with why. The replica holder
// checks each record as it would alone and writes those it keeps in one
// transaction before it answers (storeReplicas). A record alone goes as
// before (kindReplicate), and so do the records for a replica that does
// not know the batch call (a node of an older release).

const (
	kindReplicateMany = "job.replicate.many"
	kindRefused       = "refused" // a record of a batch the replica holder refused, and why
	// maxReplicaBatchBytes bounds the records of one batch call, well
	// under gossip.MaxDirectSize; a larger record goes alone.
	maxReplicaBatchBytes = 1 << 20
)

// replicateMany sends recs to their replicas (replicaTargets), those for
// the same replica in one call, and reports for each record whether every
// one of its replicas acknowledged it.
func (n *Node) replicateMany(ctx context.Context, recs []market.JobRecord) []bool {
	datas := make([][]byte, len(recs))
	targets := make([][]peer.ID, len(recs))
	byTarget := map[peer.ID][]int{}
	var order []peer.ID
	for i, rec := range recs {
		data, err := json.Marshal(rec)
		if err != nil {
			n.log.Error("cannot encode a job record", "job", rec.ID, "err", err)
		}
		datas[i] = data
		targets[i] = n.replicaTargets(rec.ID)
		if data == nil {
			continue
		}
		for _, t := range targets[i] {
			if _, ok := byTarget[t]; !ok {
				order = append(order, t)
			}
			byTarget[t] = append(byTarget[t], i)
		}
	}
	var mu sync.Mutex
	acked := make([]int, len(recs)) // replicas that acknowledged each record
	var wg sync.WaitGroup
	for _, t := range order {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, batch := range replicaBatchesOf(byTarget[t], datas) {
				var ok []bool
				if len(batch) == 1 {
					ok = []bool{n.replicateOne(ctx, t, recs[batch[0]], datas[batch[0]])}
				} else {
					ok = n.replicateBatch(ctx, t, recs, datas, batch)
				}
				mu.Lock()
				for k, i := range batch {
					if ok[k] {
						acked[i]++
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	out := make([]bool, len(recs))
	for i := range recs {
		out[i] = datas[i] != nil && acked[i] == len(targets[i])
	}
	return out
}

// replicaBatchesOf cuts the records at idx into batches of at most
// maxReplicaBatchBytes of encoded records each (a larger record alone).
func replicaBatchesOf(idx []int, datas [][]byte) [][]int {
	var out [][]int
	var cur []int
	size := 0
	for _, i := range idx {
		if len(cur) > 0 && size+len(datas[i]) > maxReplicaBatchBytes {
			out = append(out, cur)
			cur, size = nil, 0
		}
		cur = append(cur, i)
		size += len(datas[i]) + 1
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// replicateBatch sends the records at batch to replica t in one call and
// reports which it acknowledged; a replica that does not know the call
// gets them one at a time.
func (n *Node) replicateBatch(ctx context.Context, t peer.ID, recs []market.JobRecord, datas [][]byte, batch []int) []bool {
	var body bytes.Buffer
	body.WriteByte('[')
	for k, i := range batch {
		if k > 0 {
			body.WriteByte(',')
		}
		body.Write(datas[i])
	}
	body.WriteByte(']')
	ok := make([]bool, len(batch))
	cctx, cancel := context.WithTimeout(ctx, replicateAfter)
	defer cancel()
	n.dialable(t)
	next := 0
	err := n.direct.Ask(cctx, t, kindReplicateMany, body.Bytes(), func(m gossip.Message) error {
		if next >= len(batch) {
			return fmt.Errorf("more answers than the %d records sent", len(batch))
		}
		k := next
		next++
		ok[k] = n.replicaAnswer(t, recs[batch[k]], m)
		return nil
	})
	if err != nil && unknownCall(err) {
		for k, i := range batch {
			ok[k] = n.replicateOne(ctx, t, recs[i], datas[i])
		}
		return ok
	}
	if err != nil && n.ctx.Err() == nil {
		n.log.Debug("replicas not updated", "records", len(batch), "replica", t.ShortString(), "err", err)
	}
	return ok
}

// replicateOne sends rec (encoded: data) to replica t and reports whether
// it acknowledged it.
func (n *Node) replicateOne(ctx context.Context, t peer.ID, rec market.JobRecord, data []byte) bool {
	cctx, cancel := context.WithTimeout(ctx, replicateAfter)
	defer cancel()
	n.dialable(t)
	ok := false
	err := n.direct.Ask(cctx, t, kindReplicate, data, func(m gossip.Message) error {
		if m.Kind != kindAck && m.Kind != kindSuperseded {
			return fmt.Errorf("unexpected %q frame", m.Kind)
		}
		ok = n.replicaAnswer(t, rec, m)
		return nil
	})
	if err != nil && n.ctx.Err() == nil {
		n.log.Debug("replica not updated", "job", rec.ID, "replica", t.ShortString(), "err", err)
	}
	return ok
}

// replicaAnswer takes replica t's answer m to rec and reports whether t
// holds rec's change.
func (n *Node) replicaAnswer(t peer.ID, rec market.JobRecord, m gossip.Message) bool {
	switch m.Kind {
	case kindAck:
		n.repl.Acked(rec.ID, t, jobstate.MarkOf(rec))
		return true
	case kindSuperseded:
		var held market.JobRecord
		// The replica may have taken a later change of this coordinator's
		// before this copy reached it (a job that ended within its
		// submission's confirmation): it holds rec's change too.
		holds := json.Unmarshal(m.Data, &held) == nil && holdsChange(held, rec)
		if err := n.onSuperseding(t, rec, m.Data); err != nil {
			n.log.Debug("replica's answer refused", "job", rec.ID, "replica", t.ShortString(), "err", err)
		}
		return holds
	case kindRefused:
		n.log.Debug("replica not updated", "job", rec.ID, "replica", t.ShortString(), "err", string(m.Data))
	}
	return false
}

// unknownCall tells whether err is a peer's answer that it serves no call
// of that kind.
func unknownCall(err error) bool {
	return errors.Is(err, gossip.ErrRemote) && strings.Contains(err.Error(), "unknown call")
}

// serveReplicateMany stores the records of a batch from their coordinator
// and answers each, in order.
func (n *Node) serveReplicateMany(from peer.ID, data []byte, reply func(kind string, data []byte) error) error {
	var recs []market.JobRecord
	if err := json.Unmarshal(data, &recs); err != nil {
		return asCallError(api.Errorf(http.StatusBadRequest, "replicas: %v", err))
	}
	if len(recs) > maxReplicaBatch {
		return asCallError(api.Errorf(http.StatusBadRequest, "replicas: %d records, at most %d in one call", len(recs), maxReplicaBatch))
	}
	for i, res := range n.storeReplicas(from, recs) {
		var err error
		switch {
		case res.err != nil:
			err = reply(kindRefused, []byte(res.err.Error()))
		case res.top != nil:
			b, merr := json.Marshal(res.top)
			if merr != nil {
				return merr
			}
			err = reply(kindSuperseded, b)
		default:
			err = reply(kindAck, nil)
		}
		if err != nil {
			return fmt.Errorf("answering replica %d of %d: %w", i+1, len(recs), err)
		}
	}
	return nil
}
