//go:build unix

package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// The tunnel benchmarks print their figures (b.ReportMetric and a log
// line); run each once:
//
//	go test ./e2e/ -run '^$' -bench 'Ingress|MeshHop|PortForward' -benchtime 1x -v

// BenchmarkIngressKill sends 200 requests a second for 12 s through one
// node's ingress to a 3-replica service and kill -9s one replica's process
// 4 s in: the share of requests that succeed (target ≥ 99.9%). Root: the
// replicas are sandboxed.
func BenchmarkIngressKill(b *testing.B) {
	for range b.N {
		benchIngressKill(b)
	}
}

func benchIngressKill(b *testing.B) {
	m := newServiceMesh(b)
	rec := m.submitService(b)
	ing := "http://" + m.ingAddr + "/" + rec.ID + "/whoami"
	_, w, err := getWhoami(ing, nil)
	if err != nil {
		b.Fatal(err)
	}
	pid, _ := strconv.Atoi(w.Pid)
	const rate, seconds, killAt = 200, 12, 4
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	var ok, failed atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	var errs []string
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	start := time.Now()
	killed := false
	for n := 0; n < rate*seconds; n++ {
		<-tick.C
		if !killed && time.Since(start) >= killAt*time.Second {
			killed = true
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				b.Fatalf("kill -9 %d: %v", pid, err)
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			resp, err := hc.Get(ing)
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err == nil && resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("%s", resp.Status)
				}
			}
			d := time.Since(t0)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed.Add(1)
				if len(errs) < 5 {
					errs = append(errs, err.Error())
				}
				return
			}
			ok.Add(1)
			lat = append(lat, d)
		}()
	}
	wg.Wait()
	total := ok.Load() + failed.Load()
	ratio := float64(ok.Load()) / float64(total)
	slices.Sort(lat)
	b.ReportMetric(ratio*100, "%success")
	b.ReportMetric(float64(pct(lat, 50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(pct(lat, 99).Microseconds())/1000, "p99-ms")
	b.Logf("ingress, 3 replicas, %d req/s for %d s, replica share %s (pid %d) killed -9 at %d s: %d of %d succeeded (%.3f%%), latency p50 %v p99 %v max %v; errors: %v",
		rate, seconds, w.Share, pid, killAt, ok.Load(), total, ratio*100, pct(lat, 50), pct(lat, 99), lat[len(lat)-1], errs)
}

// BenchmarkMeshHop measures what the mesh adds to a request: the same
// replica asked directly on loopback, and through another node's ingress
// (client → node a → libp2p → node b → replica), one request at a time.
// Process mode (the replica listens on the machine's loopback).
func BenchmarkMeshHop(b *testing.B) {
	for range b.N {
		needReplica(b)
		ingAddr := fmt.Sprintf("127.0.0.1:%d", freePort(b))
		a := startNode(b, "a", "--ingress", ingAddr)
		r := startNode(b, "b", "--sim", "h100-sxm-80g:1", "--join", a.joinAddr())
		waitAllSee(b, []*proc{a, r}, 2, 1)
		port := freePort(b)
		rec := a.submit(market.JobSpec{AllowSimulated: true, Cards: 1, MaxPriceCNY: 30, Kind: market.KindService,
			Command: []string{replicaBinary, "serve", strconv.Itoa(port)}, Service: &market.ServiceSpec{Port: port, Public: true}})
		eventually(b, 30*time.Second, "the replica is ready", func() bool {
			r, err := a.job(rec.ID)
			return err == nil && len(readyReplicas(r)) == 1
		})
		direct := fmt.Sprintf("http://127.0.0.1:%d/x", port)
		viaMesh := "http://" + ingAddr + "/" + rec.ID + "/x"
		hc := &http.Client{Timeout: 10 * time.Second}
		measure := func(url string, n int) []time.Duration {
			out := make([]time.Duration, 0, n)
			for range n {
				t0 := time.Now()
				resp, err := hc.Get(url)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				out = append(out, time.Since(t0))
			}
			slices.Sort(out)
			return out
		}
		measure(viaMesh, 200) // warm: the tunnels are open and pooled
		measure(direct, 200)
		var d, m []time.Duration
		for range 5 { // interleaved, so that the machine's load weighs on both alike
			d = append(d, measure(direct, 400)...)
			m = append(m, measure(viaMesh, 400)...)
		}
		slices.Sort(d)
		slices.Sort(m)
		b.ReportMetric(float64((pct(m, 99)-pct(d, 99)).Microseconds())/1000, "p99-added-ms")
		b.ReportMetric(float64((pct(m, 50)-pct(d, 50)).Microseconds())/1000, "p50-added-ms")
		b.Logf("2000 requests each: direct p50 %v p99 %v; through the mesh p50 %v p99 %v; added p50 %v p99 %v",
			pct(d, 50), pct(d, 99), pct(m, 50), pct(m, 99), pct(m, 50)-pct(d, 50), pct(m, 99)-pct(d, 99))
	}
}

// BenchmarkPortForwardThroughput sends 256 MiB into a job's TCP port
// directly on loopback and through gpumesh port-forward (CLI → node a →
// libp2p → node b → the port), alternately, three times each, and compares
// the medians (target: port-forward at least 50% of direct).
func BenchmarkPortForwardThroughput(b *testing.B) {
	for range b.N {
		needReplica(b)
		a, r := apiAndRunner(b)
		alice, _ := tunnelOwners(b)
		port := freePort(b)
		id := cliJob(b, a.apiAddr, alice, "--", replicaBinary, "sink", strconv.Itoa(port))
		_, addrs := startForward(b, 1, id, "--api", a.apiAddr, "--key", alice, fmt.Sprintf("0:%d", port))
		_, local := startForward(b, 1, id, "--api", r.apiAddr, "--key", alice, fmt.Sprintf("0:%d", port))
		const size = 256 << 20
		send := func(addr string) float64 {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			buf := make([]byte, 256<<10)
			t0 := time.Now()
			for sent := 0; sent < size; sent += len(buf) {
				if _, err := c.Write(buf); err != nil {
					b.Fatal(err)
				}
			}
			c.(*net.TCPConn).CloseWrite()
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil || strings.TrimSpace(line) != strconv.Itoa(size) {
				b.Fatalf("the sink read %q, %v", line, err)
			}
			return float64(size) / (1 << 20) / time.Since(t0).Seconds()
		}
		direct := fmt.Sprintf("127.0.0.1:%d", port)
		eventually(b, 10*time.Second, "the sink listens", func() bool {
			c, err := net.Dial("tcp", direct)
			if err == nil {
				c.Close()
			}
			return err == nil
		})
		var d, f, l []float64
		for range 3 {
			d = append(d, send(direct))
			f = append(f, send(addrs[0]))
			l = append(l, send(local[0]))
		}
		slices.Sort(d)
		slices.Sort(f)
		slices.Sort(l)
		b.ReportMetric(d[1], "direct-MiB/s")
		b.ReportMetric(f[1], "forward-MiB/s")
		b.ReportMetric(f[1]/d[1]*100, "%of-direct")
		b.ReportMetric(l[1]/d[1]*100, "%of-direct-same-node")
		b.Logf("256 MiB × 3 (medians): direct loopback TCP %.0f MiB/s %.0f; port-forward through another node (libp2p hop) %.0f MiB/s %.0f = %.1f%% of direct; through the runner's own API %.0f MiB/s %.0f = %.1f%%",
			d[1], d, f[1], f, f[1]/d[1]*100, l[1], l, l[1]/d[1]*100)
	}
}

func pct(s []time.Duration, p int) time.Duration {
	if len(s) == 0 {
		return 0
	}
	i := min(len(s)-1, len(s)*p/100)
	return s[i]
}
