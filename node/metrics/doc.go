// Package metrics is a node's Prometheus metrics (every gpumesh_* name) and
// the windowed figures of its status screen: placement latency over the last
// five minutes, reroutes over the last hour, gossip rates over the last
// minute.
//
// A Metrics owns its registry; nothing touches prometheus's global one. It
// starts no goroutine. The node feeds it three ways:
//
//	cfg := metrics.DefaultConfig()
//	cfg.Version, cfg.Gossip, cfg.Network = version, g.Stats, bandwidthTotals
//	m, err := metrics.New(cfg)
//	// the node's api.Backend answers Metrics() with m.Handler(): /metrics
//
//	// events, as they happen (any goroutine):
//	m.ObservePlacement(now, running.Sub(submitted))
//	m.ObserveReroute(now, running.Sub(lost))
//	m.CountAuction(metrics.OutcomeCleared)
//	m.CountLeaseRenewal(metrics.RoleRunner); m.CountLeaseMiss(metrics.RoleCoordinator)
//	m.AddBilling(metrics.SideCharged, cardSecondsDelta, cnyDelta)
//	flaps.Changed(peer, now)       // a member changed state (flaps := metrics.NewFlaps(10*time.Minute, 6))
//
//	// on the driver's ticker, about once a second:
//	m.Sample(now)                  // gossip counters → rates
//	st := node.buildStatus(now)    // api.Status: node, mesh, jobs by state
//	st.Warnings = append(metrics.CardWarnings(st.Node.Cards), flaps.Warnings(now)...)
//	m.Fill(now, &st)               // placement p50/p99, reroutes, gossip figures, clock skew
//	m.SetStatus(&st)               // gauges read it at the next scrape
//
// The gauges (members, cards, jobs, reachability, warnings) are computed from
// the latest status when Prometheus scrapes, so the driver pays one pointer
// store per status, whatever the size of the mesh. The gossip counters are
// read from Config.Gossip at scrape time the same way.
//
// Label sets are bounded: states and outcomes come from fixed lists, model
// keys (which peers advertise) are capped at 64 per scrape with the rest
// folded into "other", and no metric carries a job ID, peer ID, token or
// payload.
package metrics
