package bench

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// gossipsub's own goroutines end with their context but cannot be
		// waited for (see gossip's package doc).
		goleak.IgnoreTopFunction("github.com/libp2p/go-libp2p-pubsub.(*PubSub).handleSendingMessage"),
	)
}
