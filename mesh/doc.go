// Package mesh gives a node its identity, its libp2p host, membership and
// failure detection (hashicorp/memberlist), discovery (bootstrap peers,
// mDNS), and an in-memory network for simulations. It knows nothing of
// auctions, jobs or gossip topics: the gossip package builds on Mesh.Host,
// and the node package drives both.
//
// # Using it
//
//	m, err := mesh.New(mesh.Config{
//		DataDir:     dir,                 // identity.key lives here (0600)
//		Network:     "cafe-17",           // memberlist label, protocol prefix
//		Secret:      secret,              // optional: a private mesh
//		ListenAddrs: listen,              // default TCP+QUIC on :4747
//		Join:        bootstrap,           // full multiaddrs ending in /p2p/ID
//		MDNS:        true,                // find LAN peers with no config
//		Meta:        mesh.Meta{Region: "cn-east", Cards: 8, FreeCards: 8},
//		Logger:      logger,
//	})
//	if err != nil { ... }              // bad config, corrupt identity, ports
//	defer m.Close()                    // leave gracefully: peers see "left"
//
//	sub := m.Subscribe(256)            // join, update, suspect, dead, left, disconnect
//	defer sub.Close()
//	for {
//		select {
//		case ev := <-sub.C:
//			if ev.Missed > 0 { resync(m.Members()) }
//			member, _ := m.Member(ev.Peer) // state, addrs, meta, last heard, RTT
//			...
//		case <-capacityChanged:
//			m.UpdateMeta(mesh.Meta{Region: "cn-east", Cards: 8, FreeCards: free})
//		case <-ctx.Done():
//			return
//		}
//	}
//
// New returns once the host listens; joining the bootstrap peers runs in the
// background with exponential backoff, so a node whose peers are down starts
// alone and joins them when they come up. Join joins more peers at any time
// and, when no peer accepts, says why as far as the protocols tell (another
// network name: the peer does not serve this network's protocols; another
// secret: the connection handshake or the membership exchange fails).
//
// # Identity and addresses
//
// A node is its libp2p peer ID, the hash of an ed25519 key kept in
// DataDir/identity.key; the peer ID is also its memberlist node name.
// memberlist addresses members by host:port, so each member also has a
// synthetic address (an IPv6 unique local address derived from a hash of its
// peer ID, port 7946) that is never dialled: the transport maps it back to
// the peer ID. An alive message whose address is not its name's own, or
// whose metadata does not decode, is refused.
//
// # Transport
//
// memberlist runs over libp2p streams (a memberlist.NodeAwareTransport):
// packets travel as length-prefixed frames on a long-lived stream per peer,
// with a bounded send queue that drops when full, as UDP would; state
// exchanges use one stream each. The sender of a packet is the
// authenticated libp2p peer at the other end of the stream. Protocol IDs
// carry the network name (/gpumesh/<network>/swim/...).
//
// # Security
//
// libp2p offers TLS 1.3 and Noise only. A private mesh (Config.Secret)
// derives two keys from the secret with HKDF-SHA256 and distinct labels: a
// libp2p private network key (every connection is encrypted with it first;
// TCP only, since QUIC cannot carry it) and memberlist's keyring key
// (AES-256-GCM on every membership packet and stream). memberlist is not
// Byzantine-tolerant: any member can gossip that another is dead. Its view
// is a hint for fast detection; leases decide what happens to jobs.
//
// # Timing
//
// Config.Profile holds memberlist's timing. FastProfile, the default,
// probes every 200 ms with a 100 ms timeout and a suspicion multiplier of
// 5 (a suspect needs three other members' confirmations to be declared
// dead quickly), gossips news every 100 ms, Lifeguard on; see FastProfile for
// the figures against memberlist's LAN defaults (LANProfile).
// Its 100 ms probe timeout suits members that answer within 100 ms; for
// members far apart use LANProfile or WANProfile.
//
// memberlist probes only the members it holds alive and tells the dead its
// news only for a while (GossipToTheDeadTime). So that the two sides of a
// healed partition find each other even when nothing happens, every node
// also tries to join one member it holds dead every ReconnectInterval (3 s,
// stretched in large meshes), as serf does; see reconnect.go.
//
// # Simulation
//
// SimNetwork runs hundreds of nodes in one process over libp2p mocknet, with
// link latency (SetLatency), cut links (Cut, Heal), isolated nodes
// (Isolate, Reconnect) and crashes (Crash: links gone, connections closed,
// no leave). Protocols built on Mesh.Host run unchanged on it.
//
// # Goroutines
//
// Every goroutine the package starts is owned by a Mesh (or its transport)
// and has returned when Close returns. memberlist's own goroutines stop
// within a probe interval of Close: its Shutdown does not wait for them.
package mesh
