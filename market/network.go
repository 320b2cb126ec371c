package market

import "fmt"

// JobNetwork is the network a job gets where it runs, from least to most:
// none, egress, host.
type JobNetwork string

// The job networks.
const (
	// NetworkNone: loopback only.
	NetworkNone JobNetwork = "none"
	// NetworkEgress: the public internet, and nothing private (the
	// supplier's LAN, cloud metadata, the node's own ports).
	NetworkEgress JobNetwork = "egress"
	// NetworkHost: the supplier's own network, unisolated. A gang across
	// nodes on it reaches its master at the master node's own address.
	NetworkHost JobNetwork = "host"
)

// ParseJobNetwork reads "none", "egress" or "host".
func ParseJobNetwork(s string) (JobNetwork, error) {
	switch n := JobNetwork(s); n {
	case NetworkNone, NetworkEgress, NetworkHost:
		return n, nil
	}
	return "", fmt.Errorf("network %q: want none, egress or host", s)
}

// rank orders the networks: none 0, egress 1, host 2.
func (n JobNetwork) rank() int {
	switch n {
	case NetworkEgress:
		return 1
	case NetworkHost:
		return 2
	}
	return 0
}

// NetworkOrDefault is the network the job gets: Network when set, else
// none. A gang across nodes on none or egress has, besides, a private
// network between its shares (see Policy.NoPrivateNet); on host its ranks
// meet on the suppliers' own networks.
func (s *JobSpec) NetworkOrDefault() JobNetwork {
	if s.Network != "" {
		return s.Network
	}
	return NetworkNone
}

// SpansNodes reports whether a per_node job may run on more than one node,
// now or once scaled: a gang across nodes.
func (s *JobSpec) SpansNodes() bool {
	if s.LayoutMode() != LayoutPerNode {
		return false
	}
	most := s.Cards
	if s.Elastic != nil {
		most = max(most, s.Elastic.Max)
	}
	return most > s.Layout.PerNode
}

func (s *JobSpec) validateNetwork() error {
	if s.Network == "" {
		return nil
	}
	if _, err := ParseJobNetwork(string(s.Network)); err != nil {
		return specErr("network", "want none, egress or host, got %q", s.Network)
	}
	return nil
}
