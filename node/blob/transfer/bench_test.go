package transfer

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/blob"
	"github.com/gpumesh/gpumesh/node/blob/internal/bench"
	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/security/noise"
	libp2ptls "github.com/libp2p/go-libp2p/p2p/security/tls"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
)

// BenchmarkRestoreFromTwoHolders prints the figure for restores:
// a tree of GPUMESH_BLOB_BENCH_SIZE (256 MiB by default; quote it at
// 4GiB) is fetched from two holders over real libp2p hosts on loopback
// TCP (TLS, yamux, as the node's), then restored into a directory. Each
// iteration measures raw loopback TCP (two connections, the same bytes,
// from memory to nowhere) just before and just after the fetch, so that
// a machine whose load changes compares like with like, and plain
// libp2p streams between the same hosts once; it prints the fetch's
// throughput against both (target ≥ 50% of raw TCP), by wall clock and
// by CPU cost, and the process's peak memory during fetch and restore
// (target < 200 MiB at 4 GiB; the holders run in the same process). The
// metrics are the medians over the iterations.
//
//	GPUMESH_BLOB_BENCH_SIZE=4GiB go test -run XXX -bench RestoreFromTwoHolders -benchtime 3x ./node/blob/transfer/
func BenchmarkRestoreFromTwoHolders(b *testing.B) {
	size, err := bench.Size()
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	tree := bench.NewTree(size, 0, 1)
	src := filepath.Join(b.TempDir(), "tree")
	if err := tree.Write(src, 1); err != nil {
		b.Fatal(err)
	}
	held, err := blob.Open(blob.Config{Dir: filepath.Join(b.TempDir(), "held"), Limit: blob.NoLimit})
	if err != nil {
		b.Fatal(err)
	}
	defer held.Close()
	held.SetLease(blob.Lease{ID: "src"})
	put, err := held.Put(ctx, src, "src")
	if err != nil {
		b.Fatal(err)
	}
	m := put.Manifest

	// Two holders serving one store (their disks would differ; the
	// bytes they serve would not), and a fetcher.
	hb, hc, ha := tcpHost(b), tcpHost(b), tcpHost(b)
	for _, h := range []host.Host{hb, hc} {
		svc, err := New(h, Config{Protocol: testProto, Store: held, Auth: &testAuth{}})
		if err != nil {
			b.Fatal(err)
		}
		defer svc.Close()
		if err := ha.Connect(ctx, peer.AddrInfo{ID: h.ID(), Addrs: h.Addrs()}); err != nil {
			b.Fatal(err)
		}
	}
	rawStreams := measureStreams(b, put.Bytes, ha, hb, hc)
	diskDir := b.TempDir()
	disk := measureDisk(b, put.Bytes, diskDir)
	if err := os.RemoveAll(diskDir); err != nil {
		b.Fatal(err)
	}
	b.Logf("tree %s, fetched from 2 holders, all in this process on %d CPUs", bench.Human(put.Bytes), runtime.NumCPU())
	b.Logf("plain libp2p streams: %s", rawStreams)
	b.Logf("disk, 1 MiB files:    %s (synced, as a push's receiver writes them; a fetch does not sync)", disk)

	var ofTCP, ofTCPByCPU, fetchMBps, tcpMBps, rss, heap []float64
	for b.Loop() {
		b.StopTimer()
		iter := b.TempDir() // emptied at the iteration's end: at 4 GiB, disk adds up
		st, err := blob.Open(blob.Config{Dir: filepath.Join(iter, "fetched"), Limit: blob.NoLimit})
		if err != nil {
			b.Fatal(err)
		}
		st.SetLease(blob.Lease{ID: "restore"})
		svc, err := New(ha, Config{Protocol: testProto, Store: st, Auth: &testAuth{}})
		if err != nil {
			b.Fatal(err)
		}
		before := measureTCP(b, put.Bytes)
		b.StartTimer()

		watch := bench.Watch()
		var fs FetchStats
		fetch := measure(put.Bytes, func() {
			if fs, err = svc.Fetch(ctx, m, []peer.ID{hb.ID(), hc.ID()}, "restore"); err != nil {
				b.Fatal(err)
			}
		})
		restore := measure(put.Bytes, func() {
			if err := st.Restore(ctx, m, filepath.Join(iter, "restored")); err != nil {
				b.Fatal(err)
			}
		})
		peak := watch()

		b.StopTimer()
		after := measureTCP(b, put.Bytes)
		rawTCP := before.with(after)
		ofTCP = append(ofTCP, 100*fetch.mbps()/rawTCP.mbps())
		ofTCPByCPU = append(ofTCPByCPU, 100*rawTCP.cpuPerGB()/fetch.cpuPerGB())
		fetchMBps = append(fetchMBps, fetch.mbps())
		tcpMBps = append(tcpMBps, rawTCP.mbps())
		rss = append(rss, float64(peak.RSS)/(1<<20))
		heap = append(heap, float64(peak.Heap)/(1<<20))
		b.Logf("raw loopback TCP:     %s (before the fetch: %4.0f MB/s, after: %4.0f MB/s)", rawTCP, before.mbps(), after.mbps())
		b.Logf("blob fetch:           %s; %d chunks, holders served %d and %d", fetch, fs.Chunks, fs.Holders[hb.ID()].Chunks, fs.Holders[hc.ID()].Chunks)
		b.Logf("restore (to files):   %s", restore)
		b.Logf("fetch vs raw TCP: %.0f%% by wall clock, %.0f%% by CPU cost (target ≥ 50%%); vs plain libp2p: %.0f%%, %.0f%%",
			100*fetch.mbps()/rawTCP.mbps(), 100*rawTCP.cpuPerGB()/fetch.cpuPerGB(),
			100*fetch.mbps()/rawStreams.mbps(), 100*rawStreams.cpuPerGB()/fetch.cpuPerGB())
		b.Logf("peak during fetch and restore: heap %s, RSS %s (whole process, holders included)",
			bench.Human(int64(peak.Heap)), bench.Human(int64(peak.RSS)))
		svc.Close()
		st.Close()
		if err := os.RemoveAll(iter); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(median(fetchMBps), "fetch-MB/s")
	b.ReportMetric(median(tcpMBps), "rawTCP-MB/s")
	b.ReportMetric(median(ofTCP), "%ofTCP")
	b.ReportMetric(median(ofTCPByCPU), "%ofTCP-by-CPU")
	b.ReportMetric(median(rss), "peak-RSS-MiB")
	b.ReportMetric(median(heap), "peak-heap-MiB")
}

// median returns the median of xs (0 for none).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// tcpHost is a libp2p host on loopback TCP with the node's security and
// the default muxer (yamux).
func tcpHost(tb testing.TB) host.Host { return tcpHostOn(tb, "/ip4/127.0.0.1/tcp/0") }

// tcpHostOn is a libp2p host listening on addr (TCP) with the node's
// security and the default muxer (yamux).
func tcpHostOn(tb testing.TB, addr string) host.Host {
	h, err := libp2p.New(
		libp2p.ListenAddrStrings(addr),
		libp2p.Security(libp2ptls.ID, libp2ptls.New),
		libp2p.Security(noise.ID, noise.New),
		libp2p.Transport(tcp.NewTCPTransport),
		libp2p.DisableRelay(),
		libp2p.DisableMetrics(),
	)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { h.Close() })
	return h
}

// run is a measured stretch of work over n bytes.
type run struct {
	n    int64
	wall time.Duration
	cpu  time.Duration
}

// measure runs f and measures its wall-clock time and CPU cost.
func measure(n int64, f func()) run {
	cpu, start := bench.CPU(), time.Now()
	f()
	return run{n: n, wall: time.Since(start), cpu: bench.CPU() - cpu}
}

func (r run) mbps() float64 { return float64(r.n) / r.wall.Seconds() / 1e6 }

// with is r and o taken as one run over both their bytes.
func (r run) with(o run) run { return run{n: r.n + o.n, wall: r.wall + o.wall, cpu: r.cpu + o.cpu} }

// cpuPerGB is CPU seconds per GB moved.
func (r run) cpuPerGB() float64 { return r.cpu.Seconds() / (float64(r.n) / 1e9) }

func (r run) String() string {
	return fmt.Sprintf("%s in %v = %4.0f MB/s; %.2f CPU-s/GB", bench.Human(r.n), r.wall.Round(time.Millisecond), r.mbps(), r.cpuPerGB())
}

// measureTCP sends n bytes over two loopback TCP connections at once,
// half each, from memory to nowhere.
func measureTCP(b *testing.B, n int64) run {
	buf := make([]byte, 1<<20)
	var conns []net.Conn
	var wg sync.WaitGroup
	for range 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		wg.Go(func() {
			defer l.Close()
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			for left := n / 2; left > 0; left -= int64(len(buf)) {
				if _, err := c.Write(buf[:min(left, int64(len(buf)))]); err != nil {
					return
				}
			}
		})
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		conns = append(conns, c)
	}
	r := measure(n, func() {
		var rg sync.WaitGroup
		for _, c := range conns {
			rg.Go(func() {
				io.Copy(io.Discard, c)
				c.Close()
			})
		}
		rg.Wait()
		wg.Wait()
	})
	return r
}

// measureDisk writes n bytes from memory into files of 1 MiB under dir,
// each synced, from four goroutines: the disk work of a push's receiver
// (a fetch leaves syncing to the kernel).
func measureDisk(b *testing.B, n int64, dir string) run {
	buf := make([]byte, 1<<20)
	files := (n + int64(len(buf)) - 1) / int64(len(buf))
	next := make(chan int64)
	return measure(n, func() {
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for i := range next {
					f, err := os.Create(filepath.Join(dir, fmt.Sprint(i)))
					if err == nil {
						_, err = f.Write(buf)
					}
					if err == nil {
						err = f.Sync()
					}
					if err != nil {
						b.Error(err)
					}
					f.Close()
				}
			})
		}
		for i := range files {
			next <- i
		}
		close(next)
		wg.Wait()
	})
}

// measureStreams sends n bytes over one libp2p stream from each of from
// to the host to at once, a share each.
func measureStreams(b *testing.B, n int64, to host.Host, from ...host.Host) run {
	const proto = "/gpumesh/bench/blast/1"
	buf := make([]byte, 1<<20)
	for _, h := range from {
		h.SetStreamHandler(proto, func(s network.Stream) {
			defer s.Close()
			var hdr [8]byte
			if _, err := io.ReadFull(s, hdr[:]); err != nil {
				s.Reset()
				return
			}
			for left := int64(binary.BigEndian.Uint64(hdr[:])); left > 0; left -= int64(len(buf)) {
				if _, err := s.Write(buf[:min(left, int64(len(buf)))]); err != nil {
					s.Reset()
					return
				}
			}
		})
		defer h.RemoveStreamHandler(proto)
	}
	var wg sync.WaitGroup
	return measure(n, func() {
		for _, h := range from {
			wg.Go(func() {
				s, err := to.NewStream(context.Background(), h.ID(), proto)
				if err != nil {
					b.Error(err)
					return
				}
				defer s.Close()
				s.Write(binary.BigEndian.AppendUint64(nil, uint64(n)/uint64(len(from))))
				s.CloseWrite()
				if _, err := io.Copy(io.Discard, s); err != nil {
					b.Error(fmt.Errorf("blast from %s: %w", h.ID().ShortString(), err))
				}
			})
		}
		wg.Wait()
	})
}
