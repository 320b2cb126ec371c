package bench

import (
	"testing"

	"github.com/gpumesh/gpumesh/mesh/leaktest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	leaktest.VerifyMain(m,
		// gossipsub's own goroutines end with their context but cannot be
		// waited for (see gossip's package doc).
		goleak.IgnoreTopFunction("github.com/libp2p/go-libp2p-pubsub.(*PubSub).handleSendingMessage"),
		// multistream's lazy negotiation on a mocknet stream that mocknet
		// never resets (leaktest's doc): leaktest ignores it by its top
		// function, (*once).Do, which misses it while it is blocked in
		// the stream's read below; the gossip mesh of 1000 nodes left
		// one behind in about half the runs.
		goleak.IgnoreAnyFunction("github.com/multiformats/go-multistream.(*lazyClientConn[...]).doReadHandshake"),
	)
}
