package mesh

import "fmt"

// Reachability says whether peers can dial this node: Config.Reachability.
type Reachability string

// The values of Config.Reachability.
const (
	// ReachabilityAuto: AutoNAT asks the peers (the default, "").
	ReachabilityAuto Reachability = "auto"
	// ReachabilityPublic: peers can dial this node; it serves as a relay
	// and answers AutoNAT for others.
	ReachabilityPublic Reachability = "public"
	// ReachabilityPrivate: this node is behind NAT; it takes relay slots
	// at once.
	ReachabilityPrivate Reachability = "private"
)

// ParseReachability reads auto, public or private ("" is auto).
func ParseReachability(s string) (Reachability, error) {
	switch r := Reachability(s); r {
	case "", ReachabilityAuto:
		return ReachabilityAuto, nil
	case ReachabilityPublic, ReachabilityPrivate:
		return r, nil
	}
	return "", fmt.Errorf("reachability %q: want auto, public or private", s)
}
