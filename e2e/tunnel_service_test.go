//go:build unix

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/owner"
)

// serviceMesh is an ingress node with no cards and three suppliers of
// one card each, running jobs sandboxed (each replica in a network of
// its own, so that all three listen on the same port); root only.
type serviceMesh struct {
	ingress   *proc
	suppliers []*proc
	ingAddr   string
}

func newServiceMesh(t testing.TB) *serviceMesh {
	t.Helper()
	needReplica(t)
	if os.Geteuid() != 0 {
		t.Skip("the service tests run each replica in its own network namespace (the sandbox), which needs root")
	}
	m := &serviceMesh{ingAddr: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	m.ingress = startNode(t, "ingress", "--ingress", m.ingAddr)
	for i := range 3 {
		m.suppliers = append(m.suppliers, startNode(t, fmt.Sprintf("s%d", i), "--sim", "h100-sxm-80g:1",
			"--join", m.ingress.joinAddr(), "--isolation", "sandbox"))
	}
	waitAllSee(t, append([]*proc{m.ingress}, m.suppliers...), 4, 3)
	return m
}

// submitService starts the replica program as a 3-replica service on port
// 8000 with a readiness path, public, and waits until all three are ready.
func (m *serviceMesh) submitService(t testing.TB) market.JobRecord {
	t.Helper()
	ref := payloadOf(t, m.ingress, map[string]string{"replica": replicaBinary})
	rec := m.ingress.submit(market.JobSpec{AllowSimulated: true, Cards: 1, MaxPriceCNY: 30, Kind: market.KindService, Replicas: 3,
		Payload: &ref, Command: []string{"./replica", "serve", "8000"},
		Service: &market.ServiceSpec{Port: 8000, ReadyPath: "/healthz", Public: true}})
	return m.waitReady(t, rec.ID, 3)
}

// waitReady waits until n replicas are running and ready.
func (m *serviceMesh) waitReady(t testing.TB, id string, n int) market.JobRecord {
	t.Helper()
	var rec market.JobRecord
	eventually(t, 60*time.Second, fmt.Sprintf("%d replicas of %s are ready", n, id), func() bool {
		r, err := m.ingress.job(id)
		rec = r
		return err == nil && len(readyReplicas(r)) == n
	})
	return rec
}

func readyReplicas(r market.JobRecord) []market.Placement {
	var out []market.Placement
	for _, p := range r.Placements {
		if p.State == market.PlacementRunning && p.Ready {
			out = append(out, p)
		}
	}
	return out
}

// whoami is what a replica says of itself.
type whoami struct{ Share, Epoch, Pid string }

func getWhoami(url string, sign func(*http.Request)) (int, whoami, error) {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if sign != nil {
		sign(req)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, whoami{}, err
	}
	defer resp.Body.Close()
	var w whoami
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK {
		err = json.Unmarshal(b, &w)
	} else {
		err = fmt.Errorf("%s: %s", resp.Status, b)
	}
	return resp.StatusCode, w, err
}

// signAs signs a request to p's API with key k.
func signAs(p *proc, k owner.Key) func(*http.Request) {
	return func(r *http.Request) {
		r.Header.Set(owner.Header, owner.SignRequest(k, r.Method, r.URL.RequestURI(), nil, time.Now()).HeaderValue())
		if p.token != "" {
			r.Header.Set("Authorization", "Bearer "+p.token)
		}
	}
}

func TestServiceAnswersThroughAnyNodeAndTheIngressAndSurvivesAKill(t *testing.T) {
	m := newServiceMesh(t)
	rec := m.submitService(t)
	api := "http://" + m.ingress.apiAddr + "/v1/jobs/" + rec.ID + "/http"
	ing := "http://" + m.ingAddr + "/" + rec.ID

	// The owner, through the node's API and through every supplier's:
	// requests are spread over the three replicas.
	seen := map[string]int{}
	for i := range 30 {
		p := append([]*proc{m.ingress}, m.suppliers...)[i%4]
		code, w, err := getWhoami("http://"+p.apiAddr+"/v1/jobs/"+rec.ID+"/http/whoami", signAs(p, testOwner()))
		if code != http.StatusOK || err != nil {
			t.Fatalf("the owner's request %d through %s: %d %v", i, p.name, code, err)
		}
		seen[w.Share]++
	}
	if len(seen) != 3 || seen["0"] < 5 || seen["1"] < 5 || seen["2"] < 5 {
		t.Errorf("30 requests reached the replicas %v; want all three, about evenly", seen)
	}
	// Another owner and a stranger are refused by the API; the ingress
	// serves the public service to anyone.
	bob, _ := owner.KeyFromSeed([]byte(strings.Repeat("b", 32)))
	if code, _, err := getWhoami(api+"/whoami", signAs(m.ingress, bob)); code != http.StatusForbidden || !strings.Contains(err.Error(), "another owner") {
		t.Errorf("another owner: %d %v", code, err)
	}
	if code, _, _ := getWhoami(api+"/whoami", nil); code != http.StatusForbidden {
		t.Errorf("no credentials: %d", code)
	}
	if code, _, err := getWhoami(ing+"/whoami", nil); code != http.StatusOK {
		t.Errorf("the ingress: %d %v", code, err)
	}
	if code, _, _ := getWhoami("http://"+m.ingAddr+"/jnosuchjob000000/whoami", nil); code != http.StatusNotFound {
		t.Errorf("the ingress, an unknown job: %d", code)
	}

	// A streamed request and response pass through unbuffered: each line
	// sent is answered before the next is written.
	pr, pw := io.Pipe()
	req, _ := http.NewRequest(http.MethodPost, ing+"/chat", pr)
	respc := make(chan *http.Response, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			close(respc)
			return
		}
		respc <- resp
	}()
	fmt.Fprintln(pw, "first")
	resp := <-respc
	if resp == nil {
		t.FailNow()
	}
	br := bufio.NewReader(resp.Body)
	for _, word := range []string{"first", "second", "third"} {
		if word != "first" {
			fmt.Fprintln(pw, word)
		}
		line, err := br.ReadString('\n')
		if err != nil || line != "data: "+word+"\n" {
			t.Fatalf("the event for %q: %q, %v", word, line, err)
		}
		br.ReadString('\n')
	}
	pw.Close()
	resp.Body.Close()

	// A replica whose probe fails stops getting requests.
	victim := readyReplicas(rec)[0]
	sup := m.supplierOf(t, victim.Node)
	unhealthy := filepath.Join(sup.dataDir, "attempts", fmt.Sprintf("%s-s%d-e%d", rec.ID, victim.Share, victim.Epoch), "work", "unhealthy")
	if err := os.WriteFile(unhealthy, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the unhealthy replica is not ready", func() bool {
		r, err := m.ingress.job(rec.ID)
		return err == nil && len(readyReplicas(r)) == 2
	})
	// The proxy reads the record within its refresh (a second).
	eventually(t, 10*time.Second, "no request reaches the unready replica", func() bool {
		for range 12 {
			if _, w, err := getWhoami(ing+"/whoami", nil); err != nil || w.Share == strconv.Itoa(victim.Share) {
				return false
			}
		}
		return true
	})
	os.Remove(unhealthy)
	m.waitReady(t, rec.ID, 3)

	// Under load, one replica's process is killed -9: every request still
	// succeeds (GETs that found it dead go to another), and the service is
	// placed again to three ready replicas.
	_, w, err := getWhoami(ing+"/whoami", nil)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(w.Pid)
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, _, err := getWhoami(ing+"/whoami", nil); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				} else {
					ok.Add(1)
				}
			}
		}()
	}
	eventually(t, 10*time.Second, "load runs", func() bool { return ok.Load() > 100 })
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 of replica share %s (pid %d): %v", w.Share, pid, err)
	}
	before := ok.Load()
	eventually(t, 20*time.Second, "load goes on after the kill", func() bool { return ok.Load() > before+300 })
	close(stop)
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d requests failed around the kill -9 of a replica; first: %v", n, n+ok.Load(), firstErr.Load())
	}
	t.Logf("%d requests through the ingress around the kill, %d failed", ok.Load()+failed.Load(), failed.Load())
	m.waitReady(t, rec.ID, 3)
}

func (m *serviceMesh) supplierOf(t *testing.T, node string) *proc {
	t.Helper()
	for _, s := range m.suppliers {
		if s.peerID == node {
			return s
		}
	}
	t.Fatalf("no supplier %s", node)
	return nil
}
