// Package gossip holds gpumesh's wire schema, its pubsub topics with
// validation, and the capacity view every node folds from them. It knows
// nothing of auctions or membership: it takes a libp2p host, carries and
// checks messages, and keeps a Book.
//
// # Wire schema
//
// Every message is a protobuf Envelope (gossippb/gossip.proto, version
// Version): sender, a per-sender sequence number, issue and expiry times, a
// 16-byte nonce, and one body in a oneof — today a CapacityAd; the direct
// protocols (bid request, bid, award, lease renewal, job forward, query, log
// chunk, cancel, job record replication) take the field numbers reserved for
// them. Hard limits (MaxEnvelopeSize, MaxPubSubMessageSize, MaxCardsPerAd,
// MaxTTL, ...) bound everything a peer can send. The generated code is
// committed; `go generate ./gossip/...` regenerates it (see gossippb).
//
// # Topics and validation
//
// Topics live under "gpumesh/<network>/v1/" (TopicsFor): "capacity" now,
// "bid-request" named for the broadcast fallback, and the "book-sync"
// stream protocol. Gossipsub runs with
// StrictSign, MaxPubSubMessageSize, peer scoring on both topics (see
// score.go for every weight and why) and a ValidatorEx on each topic that
// rejects what is malformed or forged (the envelope's sender must be the
// pubsub signer) and ignores what an honest peer may still forward
// (expired, from the future, and on capacity stale or duplicate sequence
// numbers). Rejects cost the sending peer score: one puts it below
// GossipThreshold, two on one topic below GraylistThreshold, where its
// RPCs are dropped unread. Stats counts messages by topic, verdict and
// reason, and the bytes in and out.
//
// # Point to point
//
// Direct carries the layers' own traffic between two nodes on libp2p
// streams named "/gpumesh/<network>/v1/...", every frame an envelope
// checked against the stream's authenticated peer: "msg", one-way
// messages on a stream kept open per peer (Send); "rpc", a call with a
// streamed reply on a stream of its own (Call: logs, files, job lists);
// and "ask", short calls on a stream kept open per peer, each reply in one
// write (Ask: replication, forwarded job calls, card claims), by Call to
// a peer of an earlier release that does not take asks.
//
// # Capacity
//
// An Advertiser turns the node's Supply (cards with their states, prices,
// region, reliability) into CapacityAds: published at once on change
// (coalesced to at most one per change interval, which grows with the mesh
// so that the whole mesh publishes about MeshChangeRate changes a second;
// a change undone within it, such as cards reserved for a bid that lost,
// is never published), and refreshed before they expire. The refresh interval grows with the mesh (PeerCount /
// MeshRefreshRate, 10 s to 40 min) so that a node's idle traffic stays flat
// however many peers there are; an ad lives three intervals. Membership is
// what takes a dead node's cards out at once (Book.Hide, undone by Show when
// it comes back from a partition) and a node that left (Book.Forget);
// expiry is the backstop.
//
// Because refreshes are slow in a large mesh, a node that joins does not
// wait for them: it fetches the Books of its first peers over the
// book-sync stream protocol (SyncFrom, automatic for Config.SyncPeers
// peers). Peers serve the ads exactly as their authors signed them, and the
// joiner checks each as gossip would, so a peer can withhold ads but not
// forge one.
//
// The Book holds the newest unexpired ad of every peer, its own included,
// and answers the market's queries (by model or "h100-*" prefix, memory,
// compute units, free count, price) and `gpumesh peers` (Snapshot). Time is
// always passed in: expired ads vanish from every answer at the caller's now.
//
// # Usage
//
// Node wires it together; every goroutine here is owned by a Gossip or an
// Advertiser and stopped by its Close (gossipsub's own goroutines end with
// the Gossip's context; gossipsub offers no way to wait for them):
//
//	g, err := gossip.New(host, gossip.Config{Network: "main", Logger: log})
//	if err != nil { ... }
//	defer g.Close()
//	adv, err := gossip.NewAdvertiser(g, supply, gossip.AdvertiserConfig{
//		Republish: g.MeshReady(), // publish again once the mesh forms
//		PeerCount: func() int { return g.Book().Len(time.Now()) },
//	})
//	if err != nil { ... }
//	defer adv.Close()
//
//	for {
//		select {
//		case s := <-supplyChanges: // a card was reserved, freed, taken ill
//			adv.Update(ctx, s)
//		case p := <-deadPeers: // membership (mesh) says p died
//			g.Book().Hide(p) // Show(p) if it comes back
//		case p := <-leftPeers: // p said goodbye
//			g.Book().Forget(p)
//		case spec := <-jobs: // the market looks for cards
//			offers, err := g.Book().Query(gossip.Query{Model: "h100-*", MinFree: 8, MaxPriceCNY: 25}, time.Now())
//			...
//		}
//	}
//
// Tests and simulations drive time with a ManualClock and build meshes on
// libp2p's mocknet; the benchmarks in mesh_bench_test.go run 1000 nodes in
// one process.
package gossip
