package market

import (
	"fmt"
	"net/url"
	"strings"
	"time"
)

// ServiceSpec says how a service job is reached: the port each replica
// serves on, how its readiness is probed, and whether anyone may reach it.
// Only KindService jobs have one.
//
// A replica whose spec has a ServiceSpec counts as running only once its
// readiness probe answers: its runner probes it (node/tunnel), tells the
// coordinator in its lease renewals (Renewal.Ready), and the job's record
// shows it (Placement.Ready). Nodes send requests only to ready replicas,
// and a drained replica's replacement must be ready before it is stopped.
type ServiceSpec struct {
	// Port is the TCP port every replica listens on inside its own
	// network, 1 to 65535: each node's API proxies /v1/jobs/ID/http/… to
	// it, and an ingress /ID/… when Public.
	Port int `json:"port"`
	// ReadyPath, when set, is an HTTP path probed with GET on Port: the
	// replica is ready while it answers 2xx or 3xx. Empty: ready while Port
	// accepts a TCP connection.
	ReadyPath string `json:"ready_path,omitempty"`
	// Public lets nodes started with an ingress serve the job to anyone,
	// without its owner's credentials.
	Public bool `json:"public,omitempty"`
}

// maxReadyPath bounds ServiceSpec.ReadyPath.
const maxReadyPath = 1024

func (s *ServiceSpec) validate() error {
	if s.Port < 1 || s.Port > 65535 {
		return specErr("service.port", "must be between 1 and 65535, got %d", s.Port)
	}
	if p := s.ReadyPath; p != "" {
		u, err := url.ParseRequestURI(p)
		switch {
		case len(p) > maxReadyPath:
			return specErr("service.ready_path", "at most %d bytes, got %d", maxReadyPath, len(p))
		case !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || err != nil || u.Host != "" || strings.ContainsAny(p, " #\x00"):
			return specErr("service.ready_path", "want a path starting with '/' (such as /healthz), got %q", p)
		}
		if err := checkText("service.ready_path", p, maxReadyPath); err != nil {
			return err
		}
	}
	return nil
}

func sameService(a, b *ServiceSpec) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

// ExecutionReady reports whether a running service replica's readiness
// probe answers (see ServiceSpec). The runner's renewals carry it to the
// coordinator; the first one comes at once.
type ExecutionReady struct {
	Now   time.Time
	Job   string
	Share int
	Epoch uint64
	Ready bool
}

func (e ExecutionReady) at() time.Time { return e.Now }

func (s *supplier) onExecutionReady(ev ExecutionReady) error {
	a := s.attempts[attemptKey{ev.Job, ev.Share, ev.Epoch}]
	if a == nil || !a.startSent || a.end != nil {
		return fmt.Errorf("%w: no execution of %s share %d epoch %d is running", ErrUnknownJob, ev.Job, ev.Share, ev.Epoch)
	}
	if a.rec.Ready != ev.Ready {
		a.rec.Ready = ev.Ready
		a.nextRenew = s.n.now // tell the coordinator now
		s.touch(a)
	}
	return nil
}

// onReadyRenewal takes a service replica's readiness from its renewal.
// A replica that replaces a drained one counts as running once it is
// ready: the drained one stops then.
func (c *coordinator) onReadyRenewal(j *job, p *placement, ready bool) {
	if j.spec.Service == nil || p.Ready == ready {
		return
	}
	p.Ready = ready
	c.touch(j)
	if ready && !p.StartedAt.IsZero() {
		c.replaced(j, p)
	}
}
