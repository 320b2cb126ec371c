package procbench

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
)

// watch follows every node's GET /v1/events and notes, for the jobs the
// node coordinates, when each was placed (all shares running) and when it
// ended. Events carry the coordinator's clock, which on one machine is the
// bench's. A subscriber that falls behind loses events (the node drops
// them rather than wait); the run reads the records of jobs it did not
// hear of at the end.
type watch struct {
	mu      sync.Mutex
	placed  map[string]time.Time
	ended   map[string]time.Time
	changed chan struct{}  // one token: something was noted
	ready   sync.WaitGroup // Done once per node whose stream opened
	wg      sync.WaitGroup
	stop    context.CancelFunc
}

func newWatch(c *cluster) *watch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &watch{placed: map[string]time.Time{}, ended: map[string]time.Time{}, changed: make(chan struct{}, 1), stop: cancel}
	hc := &http.Client{} // a stream: no timeout
	w.ready.Add(len(c.procs))
	for _, p := range c.procs {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			w.follow(ctx, hc, c.token, p)
		}()
	}
	return w
}

// waitReady waits until every node's stream is open, or within passes.
func (w *watch) waitReady(within time.Duration) bool {
	done := make(chan struct{})
	go func() { w.ready.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(within):
		return false
	}
}

// follow reads one node's events until ctx ends, reconnecting after a
// broken stream.
func (w *watch) follow(ctx context.Context, hc *http.Client, token string, p *proc) {
	var once sync.Once
	defer once.Do(w.ready.Done) // a stream that never opened holds no one up
	for ctx.Err() == nil {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.api+"/v1/events", nil)
		if err != nil {
			return
		}
		req.Header.Set("Authorization", "Bearer "+token)
		if resp, err := hc.Do(req); err == nil {
			if resp.StatusCode == http.StatusOK {
				once.Do(w.ready.Done)
				w.read(resp)
			}
			resp.Body.Close()
		}
		select {
		case <-ctx.Done():
		case <-p.done:
			return
		case <-time.After(100 * time.Millisecond): // before reconnecting
		}
	}
}

func (w *watch) read(resp *http.Response) {
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev api.Event
		if json.Unmarshal([]byte(data), &ev) != nil || ev.Job == "" || ev.Node != "" {
			continue // not a coordinator's event of a job
		}
		w.note(ev)
	}
}

func (w *watch) note(ev api.Event) {
	w.mu.Lock()
	switch ev.Type {
	case "placement":
		if _, ok := w.placed[ev.Job]; !ok {
			w.placed[ev.Job] = ev.At
		}
	case "end":
		if _, ok := w.ended[ev.Job]; !ok {
			w.ended[ev.Job] = ev.At
		}
	default:
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// counts reports how many of jobs were heard placed and ended.
func (w *watch) counts(jobs []string) (placed, ended int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, j := range jobs {
		if _, ok := w.placed[j]; ok {
			placed++
		}
		if _, ok := w.ended[j]; ok {
			ended++
		}
	}
	return placed, ended
}

func (w *watch) close() {
	w.stop()
	w.wg.Wait()
}
