//go:build unix

package gossip

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	libp2ptls "github.com/libp2p/go-libp2p/p2p/security/tls"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
)

// BenchmarkDirectCall is one call between two hosts on loopback TCP with
// TLS and yamux, as nodes talk, its handler answering with replies
// small frames (a replica batch's acknowledgements) and the end: by Call
// (a stream of its own) and by Ask (on a kept stream). The metric
// cpu-µs/call is the process's CPU time per call, both ends together:
// what the mesh spends on the call beyond its payload.
//
//	go test -run '^$' -bench DirectCall -count 5 ./gossip/
func BenchmarkDirectCall(b *testing.B) {
	for _, c := range []struct {
		name    string
		replies int
		ask     bool
	}{{"one-reply", 1, false}, {"eight-replies", 8, false}, {"ask/one-reply", 1, true}, {"ask/eight-replies", 8, true}} {
		replies := c.replies
		b.Run(c.name, func(b *testing.B) {
			a, z := tcpHost(b), tcpHost(b)
			if err := a.Connect(context.Background(), peer.AddrInfo{ID: z.ID(), Addrs: z.Addrs()}); err != nil {
				b.Fatal(err)
			}
			client := benchDirect(b, a, nil)
			benchDirect(b, z, func(ctx context.Context, req Message, reply func(string, []byte) error) error {
				for range replies {
					if err := reply("ack", nil); err != nil {
						return err
					}
				}
				return nil
			})
			req := make([]byte, 2800) // about a job record
			call := func() {
				got := 0
				do := client.Call
				if c.ask {
					do = client.Ask
				}
				if err := do(context.Background(), z.ID(), "bench", req, func(Message) error { got++; return nil }); err != nil || got != replies {
					b.Fatalf("call: %v, %d replies of %d", err, got, replies)
				}
			}
			call() // the protocol is known to a from here on
			cpu0 := cpuTime()
			for b.Loop() {
				call()
			}
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/call")
		})
	}
}

// BenchmarkDirectSend is one Send of one market-sized message between two
// hosts on loopback TCP with TLS and yamux, up to its delivery, one after
// another as a lane sends them. cpu-µs/send is the process's CPU time per
// Send, both ends together.
//
//	go test -run '^$' -bench DirectSend -count 5 ./gossip/
func BenchmarkDirectSend(b *testing.B) {
	a, z := tcpHost(b), tcpHost(b)
	if err := a.Connect(context.Background(), peer.AddrInfo{ID: z.ID(), Addrs: z.Addrs()}); err != nil {
		b.Fatal(err)
	}
	client := benchDirect(b, a, nil)
	got := make(chan struct{}, 1)
	d, err := NewDirect(z, DirectConfig{Network: "bench", OnMessage: func(Message) { got <- struct{}{} }})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	msg := make([]byte, 400) // a bid or a renewal
	send := func() {
		if err := client.Send(context.Background(), z.ID(), Out{Kind: "market", Data: msg}); err != nil {
			b.Fatal(err)
		}
		<-got
	}
	send()
	cpu0 := cpuTime()
	for b.Loop() {
		send()
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/send")
}

func tcpHost(b *testing.B) host.Host {
	b.Helper()
	h, err := libp2p.New(
		libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"),
		libp2p.Security(libp2ptls.ID, libp2ptls.New),
		libp2p.Transport(tcp.NewTCPTransport),
		libp2p.DisableRelay(),
		libp2p.DisableMetrics(),
	)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { h.Close() })
	return h
}

func benchDirect(b *testing.B, h host.Host, onCall func(context.Context, Message, func(string, []byte) error) error) *Direct {
	b.Helper()
	d, err := NewDirect(h, DirectConfig{Network: "bench", OnCall: onCall})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	return d
}

// cpuTime is the CPU time this process has used, all threads.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
