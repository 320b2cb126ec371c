// Package clienttest is an in-memory api.Backend for tests of API clients
// (the CLI, the demo, scripts): jobs, payloads, logs, peers and cards held in
// maps, served by the real api.Handler on an httptest server, so a client
// under test speaks the true wire format without a node.
//
//	b := clienttest.New()
//	srv := b.Serve(t, "")                    // closed by t.Cleanup
//	b.Script("j1", pendingRec, runningRec, succeededRec)
//	c, _ := client.New(srv.Listener.Addr().String())
//
// It is a fake: Submit validates the spec with the market's rules and stores a
// pending record; nothing is ever placed unless the test scripts it.
package clienttest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/blob"
)

// Coordinator is the node ID the fake puts in the records it makes.
const Coordinator = "12D3KooWFakeCoordinator0000000000000000000000000001"

// Backend is an in-memory api.Backend. Its methods are safe for concurrent
// use; the setters may be called while a server runs.
type Backend struct {
	mu       sync.Mutex
	jobs     map[string]*jobEntry
	order    []string
	payloads map[string]*blob.Manifest // by digest
	chunks   map[string][]byte         // by digest
	received int64                     // chunk bytes received
	logs     map[logKey][]byte
	gone     map[logKey]string // attempts whose output is out of reach, and why
	feeds    map[logKey]chan []byte
	peers    []api.Peer
	cards    []api.Card
	offers   []api.Offer
	// asked and unanswered are what ListJobs says of the nodes it asked.
	asked      int
	unanswered []string
	submits    []market.JobSpec
	scripts    map[string][]market.JobRecord // what the next Job calls return, in order
	gets       map[string]int
	now        func() time.Time
	// failSubmit, when set, is returned by the next Submit.
	failSubmit error
	// failPayload, when set, is returned by the next PutPayloadManifest.
	failPayload error
	// files are the archives Files answers, by job and share; filesAsked
	// what it was asked.
	files      map[logKey][]byte
	filesAsked []api.FilesRequest
	// secrets are the values PutSecrets took, by digest.
	secrets  map[string]map[string]string
	bills    map[string]api.Bill
	earnings api.ReceiptEarnings
}

type jobEntry struct {
	rec market.JobRecord
}

type logKey struct {
	job    string
	share  int
	epoch  uint64 // 0: the share's latest attempt
	stream string
}

var (
	_ api.Backend      = (*Backend)(nil)
	_ api.OfferLister  = (*Backend)(nil)
	_ api.JobLister    = (*Backend)(nil)
	_ api.PayloadStore = (*Backend)(nil)
	_ api.FileCopier   = (*Backend)(nil)
	_ api.SecretStore  = (*Backend)(nil)
)

// New returns an empty Backend whose clock is time.Now.
func New() *Backend {
	return &Backend{
		jobs:     map[string]*jobEntry{},
		payloads: map[string]*blob.Manifest{},
		chunks:   map[string][]byte{},
		logs:     map[logKey][]byte{},
		gone:     map[logKey]string{},
		feeds:    map[logKey]chan []byte{},
		gets:     map[string]int{},
		scripts:  map[string][]market.JobRecord{},
		now:      time.Now,
	}
}

// Serve serves b through api.Handler (behind token, when not empty) on a new
// httptest server that t.Cleanup closes.
func (b *Backend) Serve(t testing.TB, token string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(api.Handler(api.Config{Token: token}, b, nil))
	t.Cleanup(srv.Close)
	return srv
}

// AddJob stores rec as a known job (replacing one with the same ID).
func (b *Backend) AddJob(rec market.JobRecord) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.put(rec)
}

func (b *Backend) put(rec market.JobRecord) {
	if e, ok := b.jobs[rec.ID]; ok {
		e.rec = rec
		return
	}
	b.jobs[rec.ID] = &jobEntry{rec: rec}
	b.order = append(b.order, rec.ID)
}

// Script makes the next Job calls for id return recs one by one (the last
// one stays). The job itself must exist by then, added or submitted: an
// unknown job is a 404 whatever its script.
func (b *Backend) Script(id string, recs ...market.JobRecord) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.scripts[id] = append(b.scripts[id], recs...)
}

// Gets returns how many times Job was called for id.
func (b *Backend) Gets(id string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.gets[id]
}

// Submitted returns the specs Submit received, in order.
func (b *Backend) Submitted() []market.JobSpec {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.submits)
}

// FailNextSubmit makes the next Submit return err.
func (b *Backend) FailNextSubmit(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failSubmit = err
}

// FailNextPayload makes the next PutPayloadManifest return err (an
// *api.HTTPError for a refusal), keeping nothing.
func (b *Backend) FailNextPayload(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failPayload = err
}

// Payload returns the files of the payload whose manifest is digest, by
// path, if the fake holds all of its chunks.
func (b *Backend) Payload(digest string) (map[string][]byte, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	m, ok := b.payloads[digest]
	if !ok {
		return nil, false
	}
	files := map[string][]byte{}
	for _, e := range m.Entries {
		if e.Type != blob.TypeFile {
			continue
		}
		var data []byte
		for _, c := range e.Chunks {
			part, ok := b.chunks[c.Digest.String()]
			if !ok {
				return nil, false
			}
			data = append(data, part...)
		}
		files[e.Path] = data
	}
	return files, true
}

// ChunkBytesReceived is the size of the payload chunks uploaded so far.
func (b *Backend) ChunkBytesReceived() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.received
}

// SetPeers sets what Peers returns.
func (b *Backend) SetPeers(peers []api.Peer) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.peers = slices.Clone(peers)
}

// SetCards sets what Cards returns.
func (b *Backend) SetCards(cards []api.Card) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cards = slices.Clone(cards)
}

// SetOffers sets what Offers returns (the API filters and sorts it).
func (b *Backend) SetOffers(offers []api.Offer) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.offers = slices.Clone(offers)
}

// SetLog sets the whole output of a job's share on stream ("stdout" or
// "stderr"): what a request without follow reads.
func (b *Backend) SetLog(job string, share int, stream, text string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.logs[logKey{job: job, share: share, stream: stream}] = []byte(text)
}

// SetAttemptLog sets the whole output of one attempt of a job's share (by
// its epoch) on stream: what a request naming that epoch reads.
func (b *Backend) SetAttemptLog(job string, share int, epoch uint64, stream, text string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.logs[logKey{job, share, epoch, stream}] = []byte(text)
}

// SetAttemptGone makes a request for one attempt's output fail as a node
// answers when the attempt's runner is gone: 502 with why.
func (b *Backend) SetAttemptGone(job string, share int, epoch uint64, why string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, stream := range []string{"stdout", "stderr"} {
		b.gone[logKey{job, share, epoch, stream}] = why
	}
}

// Feed returns a channel whose chunks a following log request of the share
// receives as they are sent, after the output SetLog set; closing it ends the
// attempt (and the stream).
func (b *Backend) Feed(job string, share int, stream string) chan<- []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := logKey{job: job, share: share, stream: stream}
	if ch, ok := b.feeds[k]; ok {
		return ch
	}
	ch := make(chan []byte)
	b.feeds[k] = ch
	return ch
}

func notFound(id string) error {
	return &api.HTTPError{Status: http.StatusNotFound, Err: fmt.Errorf("job %q not found", id)}
}

// Submit validates spec and stores a pending record. The same ID with the
// same spec returns the stored record (a retried submit); with another spec
// it is a 409.
func (b *Backend) Submit(_ context.Context, spec market.JobSpec) (market.JobRecord, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.submits = append(b.submits, spec)
	if err := b.failSubmit; err != nil {
		b.failSubmit = nil
		return market.JobRecord{}, err
	}
	if err := spec.Validate(nil); err != nil {
		var se *market.SpecError
		if errors.As(err, &se) {
			return market.JobRecord{}, &api.HTTPError{Status: http.StatusBadRequest, Field: se.Field, Err: err}
		}
		return market.JobRecord{}, &api.HTTPError{Status: http.StatusBadRequest, Err: err}
	}
	if p := spec.Payload; p != nil {
		if _, ok := b.payloads[p.Manifest]; !ok {
			return market.JobRecord{}, &api.HTTPError{Status: http.StatusBadRequest, Field: "payload.manifest", Err: fmt.Errorf("payload %s was never uploaded", p.Manifest)}
		}
	}
	if e, ok := b.jobs[spec.ID]; ok {
		if !reflect.DeepEqual(e.rec.Spec, spec) {
			return market.JobRecord{}, api.Errorf(http.StatusConflict, "job %s exists with another spec", spec.ID)
		}
		return e.rec, nil
	}
	rec := market.JobRecord{
		ID: spec.ID, Spec: spec, Coordinator: Coordinator, State: market.JobPending,
		Reason: "waiting for a placement round", Term: 1, Cards: spec.TotalCards(),
		Placements: []market.Placement{}, SubmittedAt: b.now().UTC(), Version: 1,
	}
	b.put(rec)
	return rec, nil
}

// PutPayloadManifest implements api.PayloadStore: it keeps the manifest
// and names the chunks it lacks.
func (b *Backend) PutPayloadManifest(_ context.Context, body []byte) (api.PayloadUpload, error) {
	m, err := blob.DecodeManifest(body)
	if err != nil {
		return api.PayloadUpload{}, api.Errorf(http.StatusBadRequest, "payload manifest: %v", err)
	}
	d := blob.Sum(body).String()
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.failPayload; err != nil {
		b.failPayload = nil
		return api.PayloadUpload{}, err
	}
	b.payloads[d] = m
	up := api.PayloadUpload{Ref: market.PayloadRef{Manifest: d, Size: m.Size(), Holder: Coordinator}, Missing: []string{}, Expires: b.now().Add(time.Hour)}
	for _, c := range m.Chunks() {
		if _, ok := b.chunks[c.Digest.String()]; !ok {
			up.Missing = append(up.Missing, c.Digest.String())
			up.MissingBytes += c.Size
		}
	}
	return up, nil
}

// PutPayloadChunk implements api.PayloadStore: it keeps the chunk if its
// bytes hash to its name.
func (b *Backend) PutPayloadChunk(_ context.Context, manifest, chunk string, body io.Reader) error {
	data, err := io.ReadAll(body)
	if err != nil {
		return err
	}
	if got := blob.Sum(data).String(); got != chunk {
		return api.Errorf(http.StatusBadRequest, "chunk %s: the bytes sent hash to %s", chunk, got)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.payloads[manifest]; !ok {
		return api.Errorf(http.StatusNotFound, "payload manifest %s was not put here", manifest)
	}
	b.chunks[chunk] = data
	b.received += int64(len(data))
	return nil
}

// Jobs lists the jobs in the order they were added.
func (b *Backend) Jobs(context.Context) ([]market.JobRecord, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]market.JobRecord, 0, len(b.order))
	for _, id := range b.order {
		out = append(out, b.jobs[id].rec)
	}
	return out, nil
}

// SetUnanswered makes the job list say it asked asked nodes, of which ids
// did not answer.
func (b *Backend) SetUnanswered(asked int, ids ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.asked, b.unanswered = asked, slices.Clone(ids)
}

// ListJobs is Jobs with what SetUnanswered set.
func (b *Backend) ListJobs(ctx context.Context) (api.JobList, error) {
	jobs, err := b.Jobs(ctx)
	b.mu.Lock()
	defer b.mu.Unlock()
	return api.JobList{Jobs: jobs, Asked: b.asked, Unanswered: slices.Clone(b.unanswered)}, err
}

// Job returns the job's record, advancing its script by one.
func (b *Backend) Job(_ context.Context, id string) (market.JobRecord, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.gets[id]++
	e, ok := b.jobs[id]
	if !ok {
		return market.JobRecord{}, notFound(id)
	}
	if s := b.scripts[id]; len(s) > 0 {
		e.rec, b.scripts[id] = s[0], s[1:]
	}
	return e.rec, nil
}

// Cancel moves a job that has not ended to cancelled.
func (b *Backend) Cancel(_ context.Context, id string) (market.JobRecord, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.jobs[id]
	if !ok {
		return market.JobRecord{}, notFound(id)
	}
	if !e.rec.State.Terminal() {
		e.rec.State, e.rec.Reason = market.JobCancelled, "cancelled by its owner"
		e.rec.EndedAt = b.now().UTC()
		e.rec.Version++
		delete(b.scripts, id)
	}
	return e.rec, nil
}

// Scale sets an elastic job's card count; a job without an elastic range,
// or a count outside it, is a 400 naming "cards".
func (b *Backend) Scale(_ context.Context, id string, cards int) (market.JobRecord, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.jobs[id]
	if !ok {
		return market.JobRecord{}, notFound(id)
	}
	el := e.rec.Spec.Elastic
	switch {
	case e.rec.State.Terminal():
		return market.JobRecord{}, api.Errorf(http.StatusConflict, "job %s has ended (%s): it cannot be scaled", id, e.rec.State)
	case el == nil:
		return market.JobRecord{}, &api.HTTPError{Status: http.StatusBadRequest, Field: "cards", Err: fmt.Errorf("job %s is not elastic", id)}
	case cards < el.Min || cards > el.Max:
		return market.JobRecord{}, &api.HTTPError{Status: http.StatusBadRequest, Field: "cards", Err: fmt.Errorf("cards %d is outside the elastic range %d..%d", cards, el.Min, el.Max)}
	}
	// Like a node, a scale-down stops whole running shares (the last
	// first) and keeps what they cannot give back.
	held := 0
	for _, p := range e.rec.Placements {
		if p.State == market.PlacementRunning {
			held += len(p.Cards)
		}
	}
	for i := len(e.rec.Placements) - 1; i >= 0 && held > cards; i-- {
		p := &e.rec.Placements[i]
		if p.State == market.PlacementRunning && held-len(p.Cards) >= cards {
			p.State, p.Reason = market.PlacementStopping, "scaled down"
			held -= len(p.Cards)
		}
	}
	if held > cards {
		cards = held
	}
	e.rec.Cards = cards
	e.rec.Version++
	return e.rec, nil
}

// Logs writes the share's stored output from req.Offset (SetLog, or
// SetAttemptLog for a request naming an epoch), then, when following and a
// Feed exists, each chunk fed until the feed is closed. Like a node, it
// answers 404 for a job without placements, for a share the job's record
// has no placement of (Field "share") and for an epoch the share has no
// placement of (Field "epoch"), and 502 for an attempt SetAttemptGone
// marked.
func (b *Backend) Logs(ctx context.Context, req api.LogRequest, w io.Writer, flush func()) error {
	stream := req.Stream
	if stream == "" {
		stream = "stdout"
	}
	k := logKey{req.Job, req.Share, req.Epoch, stream}
	b.mu.Lock()
	e, known := b.jobs[req.Job]
	var rec market.JobRecord
	if known {
		rec = e.rec
	}
	text := b.logs[k]
	feed := b.feeds[k]
	gone, isGone := b.gone[k]
	b.mu.Unlock()
	if !known {
		return notFound(req.Job)
	}
	// As a node does: the output of a share that was never placed is a 404.
	if len(rec.Placements) == 0 {
		return api.Errorf(http.StatusNotFound, "job %s has not been placed yet (%s)", req.Job, rec.State)
	}
	if !slices.ContainsFunc(rec.Placements, func(p market.Placement) bool { return p.Share == req.Share }) {
		return &api.HTTPError{Status: http.StatusNotFound, Field: "share", Err: fmt.Errorf("job %s has no share %s", req.Job, strconv.Itoa(req.Share))}
	}
	if req.Epoch != 0 && !slices.ContainsFunc(rec.Placements, func(p market.Placement) bool { return p.Share == req.Share && p.Epoch == req.Epoch }) {
		return &api.HTTPError{Status: http.StatusNotFound, Field: "epoch", Err: fmt.Errorf("job %s share %d has no attempt of epoch %d", req.Job, req.Share, req.Epoch)}
	}
	if isGone {
		return api.Errorf(http.StatusBadGateway, "%s", gone)
	}
	if req.Offset < int64(len(text)) {
		if _, err := io.Copy(w, bytes.NewReader(text[req.Offset:])); err != nil {
			return err
		}
	}
	flush()
	if !req.Follow || feed == nil {
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case chunk, ok := <-feed:
			if !ok {
				return nil
			}
			if _, err := w.Write(chunk); err != nil {
				return err
			}
			flush()
		}
	}
}

// Peers returns what SetPeers set.
func (b *Backend) Peers(context.Context) ([]api.Peer, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.peers), nil
}

// Cards returns what SetCards set.
func (b *Backend) Cards(context.Context) ([]api.Card, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.cards), nil
}

// Offers returns what SetOffers set.
func (b *Backend) Offers(context.Context) ([]api.Offer, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.offers), nil
}

// Status returns a small summary: the number of jobs and peers.
func (b *Backend) Status(context.Context) (any, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return map[string]int{"jobs": len(b.jobs), "peers": len(b.peers)}, nil
}

// Subscribe returns a subscription that never delivers an event.
func (b *Backend) Subscribe() (<-chan api.Event, func()) {
	ch := make(chan api.Event)
	var once sync.Once
	return ch, func() { once.Do(func() { close(ch) }) }
}

// Ready reports one check, always ready.
func (b *Backend) Ready() map[string]error { return map[string]error{"fake": nil} }

// Drain implements api.Backend: the fake has nothing to move.
func (b *Backend) Drain(context.Context) error { return nil }

// Metrics serves nothing (404).
func (b *Backend) Metrics() http.Handler { return nil }

// SetFiles makes Files answer for a share of job with archive (a tar, as
// the node sends it), whatever the path; nil makes it answer 404.
func (b *Backend) SetFiles(job string, share int, archive []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.files == nil {
		b.files = map[logKey][]byte{}
	}
	b.files[logKey{job: job, share: share}] = archive
}

// FilesAsked returns what Files was asked, in order.
func (b *Backend) FilesAsked() []api.FilesRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]api.FilesRequest(nil), b.filesAsked...)
}

// Files implements api.FileCopier with the archive SetFiles gave.
func (b *Backend) Files(_ context.Context, req api.FilesRequest, w io.Writer) error {
	b.mu.Lock()
	b.filesAsked = append(b.filesAsked, req)
	_, known := b.jobs[req.Job]
	archive, ok := b.files[logKey{job: req.Job, share: req.Share}]
	b.mu.Unlock()
	switch {
	case !known:
		return notFound(req.Job)
	case !ok || archive == nil:
		return &api.HTTPError{Status: http.StatusNotFound, Field: "path",
			Err: fmt.Errorf("job %s share %d: no %q in its working directory", req.Job, req.Share, req.Path)}
	}
	_, err := w.Write(archive)
	return err
}

// PutSecrets implements api.SecretStore: it keeps the values under a
// digest of them.
func (b *Backend) PutSecrets(_ context.Context, values map[string]string) (market.SecretsRef, error) {
	if len(values) == 0 {
		return market.SecretsRef{}, api.Errorf(http.StatusBadRequest, "no secrets")
	}
	body, _ := json.Marshal(values)
	d := blob.Sum(body).String()
	names := make([]string, 0, len(values))
	for k := range values {
		names = append(names, k)
	}
	sort.Strings(names)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.secrets == nil {
		b.secrets = map[string]map[string]string{}
	}
	b.secrets[d] = values
	return market.SecretsRef{Names: names, Digest: d, Holder: Coordinator}, nil
}

// Secrets returns the values PutSecrets took under digest.
func (b *Backend) Secrets(digest string) (map[string]string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.secrets[digest]
	return v, ok
}

// SetBill makes b the bill of its job.
func (b *Backend) SetBill(bill api.Bill) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bills == nil {
		b.bills = map[string]api.Bill{}
	}
	b.bills[bill.Job] = bill
}

// Bill implements api.BillReader.
func (b *Backend) Bill(_ context.Context, id string) (api.Bill, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	bill, ok := b.bills[id]
	if !ok {
		return api.Bill{}, api.Errorf(http.StatusNotFound, "no job %s", id)
	}
	return bill, nil
}

// SetEarnings sets what ReceiptEarnings answers.
func (b *Backend) SetEarnings(e api.ReceiptEarnings) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.earnings = e
}

// ReceiptEarnings implements api.EarningsReader; it records since in Since.
func (b *Backend) ReceiptEarnings(_ context.Context, since time.Time) (api.ReceiptEarnings, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.earnings
	e.Since = since
	return e, nil
}
