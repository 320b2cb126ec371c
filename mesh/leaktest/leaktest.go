// Package leaktest fails a test binary whose goroutines outlive its tests.
//
// memberlist's Shutdown and gossipsub's Close do not wait for all of their
// own goroutines: a probe in flight ends within its ack timeout, a send
// loop when its context is seen. So the check polls until a deadline
// instead of looking once, as goleak.VerifyTestMain does:
//
//	func TestMain(m *testing.M) { leaktest.VerifyMain(m) }
package leaktest

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Grace is how long goroutines get to end after the tests.
const Grace = 5 * time.Second

// VerifyMain runs the tests and then, when they passed, waits up to Grace
// for every goroutine but the ignored ones to end; it exits 1 naming the
// ones left. It does not return.
//
// One goroutine is always ignored: mocknet's per-stream transport loop. It
// ends when its stream is closed or reset, or when the connection the stream
// is listed on closes. A stream opened while its connection was closing is
// never listed (mocknet resets only the streams it had listed when the close
// began), so when the code holding it also drops it without a reset — as
// gossipsub's inbound handler does when it is closed while replacing a
// duplicate stream — the loop idles on, or blocks for good writing what
// was sent into the pipe of the stream no one reads (io.(*pipe).write on
// top, the loop below it). That is mocknet's leak, not ours;
// our own handlers and openers still show up if they leak, because they are
// goroutines of their own. For the same reason gossipsub's goroutines that
// read, write or close such a stream (handlePeerDead, handleNewStream,
// handleSendingMessages, and multistream's lazy negotiation under them)
// can wait on it for good, and are ignored too.
func VerifyMain(m *testing.M, opts ...goleak.Option) {
	opts = append(opts,
		goleak.IgnoreAnyFunction("github.com/libp2p/go-libp2p/p2p/net/mock.(*stream).transport"),
		goleak.IgnoreAnyFunction("github.com/libp2p/go-libp2p-pubsub.(*PubSub).handlePeerDead"),
		goleak.IgnoreAnyFunction("github.com/libp2p/go-libp2p-pubsub.(*PubSub).handleNewStream"),
		goleak.IgnoreAnyFunction("github.com/libp2p/go-libp2p-pubsub.(*PubSub).handleSendingMessages"),
		goleak.IgnoreTopFunction("github.com/multiformats/go-multistream.(*once).Do"),
		// The same lazy negotiation while it is blocked in the stream's
		// read, below (*once).Do (the 1000-node gossip mesh of the bench
		// left one in about half the runs).
		goleak.IgnoreAnyFunction("github.com/multiformats/go-multistream.(*lazyClientConn[...]).doReadHandshake"),
	)
	code := m.Run()
	if code == 0 {
		deadline := time.Now().Add(Grace)
		for {
			err := goleak.Find(opts...)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
				code = 1
				break
			}
			time.Sleep(50 * time.Millisecond) // polling interval
		}
	}
	os.Exit(code)
}
