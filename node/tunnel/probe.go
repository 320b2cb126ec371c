package tunnel

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// Defaults of ProberConfig.
const (
	DefaultProbeInterval = 500 * time.Millisecond
	DefaultProbeTimeout  = time.Second
	// DefaultFailures is how many probes in a row must fail before a ready
	// replica is unready (one that answers is ready at once).
	DefaultFailures = 2
)

// ReplicaKey names a replica: one attempt of one share.
type ReplicaKey struct {
	Job   string
	Share int
	Epoch uint64
}

// Replica is a service replica running on this node, to be probed.
type Replica struct {
	Key     ReplicaKey
	Attempt Attempt
	Port    int
	// Path is the HTTP path probed with GET; empty probes a TCP connect.
	Path string
}

// ProberConfig configures a Prober.
type ProberConfig struct {
	// OnChange is told each change of a replica's readiness (the first
	// answer included). It is called from the probing goroutines and must
	// not block.
	OnChange func(ReplicaKey, bool)
	Logger   *slog.Logger
	// Interval, Timeout, Failures: see the defaults.
	Interval, Timeout time.Duration
	Failures          int
}

// Prober probes the readiness of the service replicas running on this
// node: a TCP connect to the service's port inside the replica's network,
// or an HTTP GET of its ready path answered 2xx or 3xx. It owns one
// goroutine per replica; Close stops them and waits.
type Prober struct {
	cfg ProberConfig

	mu     sync.Mutex
	probes map[ReplicaKey]*probe
	closed bool
	wg     sync.WaitGroup
}

type probe struct {
	stop  context.CancelFunc
	ready bool
}

// NewProber returns a Prober probing nothing yet.
func NewProber(cfg ProberConfig) *Prober {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultProbeInterval
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultProbeTimeout
	}
	if cfg.Failures <= 0 {
		cfg.Failures = DefaultFailures
	}
	if cfg.OnChange == nil {
		cfg.OnChange = func(ReplicaKey, bool) {}
	}
	return &Prober{cfg: cfg, probes: map[ReplicaKey]*probe{}}
}

// Set makes the replicas probed exactly those given: new ones start
// (unready until their first probe answers), missing ones stop.
func (p *Prober) Set(replicas []Replica) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	want := map[ReplicaKey]bool{}
	for _, r := range replicas {
		want[r.Key] = true
		if _, ok := p.probes[r.Key]; ok {
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		pr := &probe{stop: cancel}
		p.probes[r.Key] = pr
		p.wg.Add(1)
		go p.run(ctx, r, pr)
	}
	for k, pr := range p.probes {
		if !want[k] {
			pr.stop()
			delete(p.probes, k)
		}
	}
}

// Ready reports whether the replica's last probes answered.
func (p *Prober) Ready(k ReplicaKey) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	pr, ok := p.probes[k]
	return ok && pr.ready
}

// Close stops every probe and waits for them.
func (p *Prober) Close() {
	p.mu.Lock()
	p.closed = true
	for k, pr := range p.probes {
		pr.stop()
		delete(p.probes, k)
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Prober) run(ctx context.Context, r Replica, pr *probe) {
	defer p.wg.Done()
	log := p.cfg.Logger.With("job", r.Key.Job, "share", r.Key.Share, "epoch", r.Key.Epoch)
	client := &http.Client{
		Transport: &http.Transport{
			DialContext:       func(ctx context.Context, _, _ string) (net.Conn, error) { return r.Attempt.DialTCP(ctx, r.Port) },
			DisableKeepAlives: true,
		},
		Timeout:       p.cfg.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	defer client.CloseIdleConnections()
	failures, known := 0, false
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for {
		ok := p.check(ctx, client, r)
		if ctx.Err() != nil {
			return
		}
		if ok {
			failures = 0
		} else {
			failures++
		}
		p.mu.Lock()
		was := pr.ready
		now := ok || (was && failures < p.cfg.Failures)
		pr.ready = now
		p.mu.Unlock()
		if now != was || !known {
			known = true
			log.Info("service replica readiness", "ready", now)
			p.cfg.OnChange(r.Key, now)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (p *Prober) check(ctx context.Context, client *http.Client, r Replica) bool {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	if r.Path == "" {
		c, err := r.Attempt.DialTCP(ctx, r.Port)
		if err != nil {
			return false
		}
		c.Close()
		return true
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://localhost"+r.Path, nil)
	if err != nil {
		return false
	}
	req.Header.Set("User-Agent", "gpumesh-probe")
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode >= 200 && resp.StatusCode < 400
}
