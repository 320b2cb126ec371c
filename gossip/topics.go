package gossip

import (
	"fmt"
	"regexp"

	"github.com/libp2p/go-libp2p/core/protocol"
)

// networkName is what a network name may look like: it goes into topic and
// protocol names, so it is short and plain.
var networkName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`)

// Topics are the pubsub topic and stream protocol names of one network, all
// under "gpumesh/<network>/v1/". Nodes of different networks never share one.
type Topics struct {
	// Capacity carries CapacityAds.
	Capacity string
	// BidRequest will carry broadcast bid requests, the fallback when a
	// coordinator's Book cannot satisfy a job. Nothing is published on it yet.
	BidRequest string
	// BookSync is the stream protocol a joining node fetches its peers'
	// Books with: "/gpumesh/<network>/v1/book-sync".
	BookSync protocol.ID
}

// TopicsFor returns the topic names of network, which must be 1 to 32
// lower-case letters, digits and '-', starting with a letter or digit.
func TopicsFor(network string) (Topics, error) {
	if err := ValidateNetwork(network); err != nil {
		return Topics{}, err
	}
	prefix := fmt.Sprintf("gpumesh/%s/v%d/", network, Version)
	return Topics{Capacity: prefix + "capacity", BidRequest: prefix + "bid-request", BookSync: protocol.ID("/" + prefix + "book-sync")}, nil
}

// ValidateNetwork reports whether network is a usable network name.
func ValidateNetwork(network string) error {
	if !networkName.MatchString(network) {
		return fmt.Errorf("gossip: network name %q: want 1 to 32 of a-z, 0-9 and '-', not starting with '-'", network)
	}
	return nil
}
