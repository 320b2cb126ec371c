package portuse

import (
	"fmt"
	"net"
)

// FreeLoopback returns n distinct TCP ports free on 127.0.0.1 now, for
// processes that will listen on them (the bench's and the tests' nodes).
// Each port's listener stays open until all are picked: a port closed at
// once may be handed out again by the next pick, and a node given one port
// for both its mesh and its API refuses to start.
func FreeLoopback(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("no free loopback port: %w", err)
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
