// Package mesh gives a node its identity, its libp2p host, membership and
// failure detection (memberlist), discovery (bootstrap peers, mDNS), and an
// in-memory network for simulations. It knows nothing of auctions or jobs.
package mesh
