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
	)
}
