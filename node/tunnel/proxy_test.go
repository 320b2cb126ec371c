//go:build unix

package tunnel

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market/owner"
)

// replicaServer is one replica's HTTP server on the far node: it answers
// with its name, counts what it served, and can die like a killed process.
type replicaServer struct {
	name   string
	srv    *httptest.Server
	served atomic.Int64
}

func newReplica(t *testing.T, name string, h http.HandlerFunc) *replicaServer {
	t.Helper()
	rs := &replicaServer{name: name}
	if h == nil {
		h = func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "%s %s %s %s", name, r.Method, r.URL.RequestURI(), body)
		}
	}
	rs.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rs.served.Add(1)
		h(w, r)
	}))
	t.Cleanup(rs.srv.Close)
	return rs
}

func (rs *replicaServer) port() int { return rs.srv.Listener.Addr().(*net.TCPAddr).Port }

// die ends the server as kill -9 ends a process: its connections close
// and its port stops answering.
func (rs *replicaServer) die() {
	rs.srv.CloseClientConnections()
	rs.srv.Close()
}

// proxyRig is a far node running replicas of job "svc" (one target per
// share, each a port of its own) and a near node proxying to them.
type proxyRig struct {
	*rig
	proxy    *Proxy
	replicas []*replicaServer
	public   bool
	front    *httptest.Server // the near node's API, for this test: /svc/… as the owner
}

func newProxyRig(t *testing.T, handlers ...http.HandlerFunc) *proxyRig {
	t.Helper()
	pr := &proxyRig{rig: newRig(t)}
	var eps []Endpoint
	for i, h := range handlers {
		rs := newReplica(t, fmt.Sprintf("replica-%d", i), h)
		pr.replicas = append(pr.replicas, rs)
		pr.jobs.set("svc", i, Target{Attempt: pr.run, Epoch: 1, Owner: pr.owner.ID(), Port: rs.port()})
		eps = append(eps, Endpoint{Node: pr.farID, Share: i, Epoch: 1})
	}
	var err error
	pr.proxy, err = NewProxy(ProxyConfig{Service: pr.near, Cooldown: time.Minute, Lookup: func(ctx context.Context, job string) (Backend, error) {
		if job != "svc" {
			return Backend{}, Errorf(http.StatusNotFound, "no job %s", job)
		}
		return Backend{Owner: pr.owner.ID(), Public: pr.public, Ready: eps}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pr.proxy.Close)
	pr.front = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		job, path, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		proof := owner.SignRequest(pr.owner, r.Method, HTTPPrefix(job)+"/"+path, nil, time.Now())
		pr.proxy.ServeHTTP(w, r, ProxyRequest{Job: job, Path: "/" + path, Caller: pr.owner.ID(), Proof: &proof})
	}))
	t.Cleanup(pr.front.Close)
	return pr
}

func (pr *proxyRig) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(pr.front.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestProxySpreadsRequestsOverReplicasAndSkipsADeadOne(t *testing.T) {
	pr := newProxyRig(t, nil, nil, nil)
	for i := range 60 {
		code, body := pr.get(t, fmt.Sprintf("/svc/hello?i=%d", i))
		if code != http.StatusOK || !strings.HasSuffix(body, fmt.Sprintf(" GET /hello?i=%d ", i)) {
			t.Fatalf("request %d: %d %q", i, code, body)
		}
	}
	for _, rs := range pr.replicas {
		if n := rs.served.Load(); n < 15 || n > 25 {
			t.Errorf("%s served %d of 60 requests; want about a third", rs.name, n)
		}
	}
	pr.replicas[1].die()
	for i := range 30 {
		if code, body := pr.get(t, "/svc/after"); code != http.StatusOK || strings.HasPrefix(body, "replica-1") {
			t.Fatalf("request %d after a replica died: %d %q", i, code, body)
		}
	}
}

func TestProxyRetriesOnlyIdempotentRequestsWhoseReplicaDiedMidway(t *testing.T) {
	// Replica 0 takes every request and dies before answering; replica 1
	// answers. Round-robin starts on either, so each method is tried a few
	// times.
	dies := func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		hj, _ := w.(http.Hijacker)
		c, _, _ := hj.Hijack()
		c.Close()
	}
	pr := newProxyRig(t, dies, nil)
	var postFailed, getFailed int
	for range 6 {
		if code, _ := pr.get(t, "/svc/x"); code != http.StatusOK {
			getFailed++
		}
		resp, err := http.Post(pr.front.URL+"/svc/order", "text/plain", strings.NewReader("one pizza"))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusBadGateway && strings.Contains(string(b), "a POST is not sent twice"):
			postFailed++
		case resp.StatusCode == http.StatusOK && string(b) == "replica-1 POST /order one pizza":
		default:
			t.Fatalf("POST: %d %s", resp.StatusCode, b)
		}
	}
	if getFailed != 0 {
		t.Errorf("%d of 6 GETs failed; a GET is sent again to another replica", getFailed)
	}
	if postFailed == 0 {
		t.Error("no POST reached the dying replica: the test proves nothing")
	}
}

func TestProxyStreamsResponsesAsTheyCome(t *testing.T) {
	release := make(chan struct{})
	pr := newProxyRig(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		<-release
		fmt.Fprintf(w, "data: second\n\n")
	})
	resp, err := http.Get(pr.front.URL + "/svc/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("content type %q", ct)
	}
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "data: first\n" {
		t.Fatalf("first event %q, %v (the proxy held it back?)", line, err)
	}
	close(release)
	rest, _ := io.ReadAll(br)
	if string(rest) != "\ndata: second\n\n" {
		t.Errorf("the rest: %q", rest)
	}
}

func TestProxyAnswersOnlyItsOwnerUnlessPublic(t *testing.T) {
	pr := newProxyRig(t, nil)
	serve := func(req ProxyRequest) (int, string) {
		w := httptest.NewRecorder()
		pr.proxy.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/x", nil), req)
		return w.Code, w.Body.String()
	}
	if code, body := serve(ProxyRequest{Job: "svc", Path: "/x"}); code != http.StatusNotFound || !strings.Contains(body, "no public service svc") {
		t.Errorf("an ingress request to a private service: %d %s", code, body)
	}
	if code, body := serve(ProxyRequest{Job: "svc", Path: "/x", Caller: key(t, 9).ID()}); code != http.StatusForbidden || !strings.Contains(body, "another owner") {
		t.Errorf("another owner: %d %s", code, body)
	}
	if code, body := serve(ProxyRequest{Job: "nope", Path: "/x", Caller: pr.owner.ID()}); code != http.StatusNotFound || !strings.Contains(body, "no job nope") {
		t.Errorf("an unknown job: %d %s", code, body)
	}
	pr.public = true
	pr.jobs.set("svc", 0, Target{Attempt: pr.run, Epoch: 1, Owner: pr.owner.ID(), Port: pr.replicas[0].port(), Public: true})
	pr.proxy.invalidate("svc")
	if code, body := serve(ProxyRequest{Job: "svc", Path: "/x"}); code != http.StatusOK || body != "replica-0 GET /x " {
		t.Errorf("an ingress request to a public service: %d %q", code, body)
	}
}

func TestProberFollowsTheReplicasPort(t *testing.T) {
	r := newRig(t)
	var mu sync.Mutex
	healthy := true
	rs := newReplica(t, "r", func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if req.URL.Path != "/healthz" || !healthy {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	changes := make(chan bool, 16)
	p := NewProber(ProberConfig{Interval: 10 * time.Millisecond, OnChange: func(_ ReplicaKey, ok bool) { changes <- ok }})
	defer p.Close()
	k := ReplicaKey{"svc", 0, 1}
	p.Set([]Replica{{Key: k, Attempt: r.run, Port: rs.port(), Path: "/healthz"}})
	expect := func(k ReplicaKey, want bool) {
		t.Helper()
		select {
		case got := <-changes:
			if got != want || p.Ready(k) != want {
				t.Fatalf("readiness %v (Ready %v), want %v", got, p.Ready(k), want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no change to %v", want)
		}
	}
	expect(k, true)
	mu.Lock()
	healthy = false
	mu.Unlock()
	expect(k, false)
	mu.Lock()
	healthy = true
	mu.Unlock()
	expect(k, true)
	rs.die()
	expect(k, false)
	// A TCP probe: ready while something listens.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	k2 := ReplicaKey{"svc", 1, 1}
	p.Set([]Replica{{Key: k2, Attempt: r.run, Port: ln.Addr().(*net.TCPAddr).Port}})
	expect(k2, true)
	if p.Ready(k) {
		t.Error("a replica no longer set is still ready")
	}
	ln.Close()
	expect(k2, false)
}

func TestProxyForgetsJobsNobodyAsksForAgain(t *testing.T) {
	pr := newProxyRig(t, nil)
	pr.proxy.cfg.Stale = time.Millisecond
	for i := range 3 * sweepAbove {
		w := httptest.NewRecorder()
		pr.proxy.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/x", nil), ProxyRequest{Job: fmt.Sprintf("made-up-%d", i), Path: "/x"})
		if w.Code != http.StatusNotFound {
			t.Fatalf("a made-up job: %d", w.Code)
		}
		time.Sleep(time.Millisecond) // ages the records past Stale
	}
	pr.proxy.mu.Lock()
	n := len(pr.proxy.backends)
	pr.proxy.mu.Unlock()
	if n > sweepAbove+1 {
		t.Errorf("the proxy holds %d jobs' records after %d made-up IDs; want at most %d", n, 3*sweepAbove, sweepAbove+1)
	}
}
