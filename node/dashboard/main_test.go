package dashboard

import (
	"testing"

	"github.com/gpumesh/gpumesh/mesh/leaktest"
	"go.uber.org/goleak"
)

// TestMain fails the run if goroutines outlive the tests. The demo mesh's
// nodes stop with goroutines of memberlist and gossipsub that end shortly
// after (leaktest).
func TestMain(m *testing.M) {
	leaktest.VerifyMain(m,
		goleak.IgnoreTopFunction("github.com/libp2p/go-libp2p-pubsub.(*PubSub).handleSendingMessage"))
}
