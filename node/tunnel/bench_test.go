//go:build unix

package tunnel

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/tunnel/wire"
)

// sinkServer reads each connection to its end and answers the count.
func sinkServer(b testing.TB) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				n, _ := io.Copy(io.Discard, c)
				fmt.Fprintf(c, "%d\n", n)
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// BenchmarkForwardThroughput sends 64 MiB per op through one forward
// tunnel between two libp2p hosts on loopback (TLS, yamux) into a TCP
// sink: the tunnel's own cost, without the API's hop.
func BenchmarkForwardThroughput(b *testing.B) {
	r := newRig(b)
	port := sinkServer(b)
	const size = 64 << 20
	buf := make([]byte, 256<<10)
	b.SetBytes(size)
	b.ResetTimer()
	for range b.N {
		c, _, err := r.near.Open(context.Background(), r.farID,
			signedRequest(r.owner, KindForward, "j1", 0, "/v1/jobs/j1/forward", wire.ForwardRequest{Port: port}))
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		for sent := 0; sent < size; sent += len(buf) {
			if _, err := c.Write(buf); err != nil {
				b.Fatal(err)
			}
		}
		c.CloseWrite()
		line, _ := bufio.NewReader(c).ReadString('\n')
		if strings.TrimSpace(line) != strconv.Itoa(size) {
			b.Fatalf("sink read %q", line)
		}
		_ = t0
		c.Close()
	}
}
