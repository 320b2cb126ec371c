// Package bench measures what gpumesh promises, on this machine, against
// a baseline: `gpumesh bench`. Each scenario reports real time here and,
// where it applies, protocol time under virtual time (the market's
// markettest harness with 0.5 ms and 40 ms one-way link latency), which
// does not depend on the machine's load.
//
// The scenarios:
//
//   - placement: submit → every share running for 1, 8, 64 and 1000-card
//     jobs; median and p99, and round trips in protocol time.
//   - throughput: jobs placed per second with many concurrent submitters,
//     by the full-node mesh and by the market core, with the broadcast
//     design as the baseline.
//   - scaleup: a running elastic job from 1 to 1000 cards.
//   - failover: reroute latency after a crash and after a silent loss; CDF.
//   - gossip: ad propagation, idle bytes per node and memory per node on a
//     1000-node gossip mesh (the resident set's growth, held to 1 MB, and
//     the Go heap and stacks).
//   - quality: throughput and cost of the mesh's placements against an
//     ideal central matcher on the same workload.
//
// Real-time figures come from an in-process mesh of full nodes
// (node/sim.Cluster: node.Start on mesh.SimNetwork), Config.Nodes of them
// (default 100; each takes about FullNodeMiB, CheckMemory refuses a mesh
// that would not fit). Every node shares this machine's CPUs, so these
// figures measure the machine as much as the protocol.
//
// Usage:
//
//	cfg := bench.Config{Scenarios: []string{"placement"}, Nodes: 100}
//	res, err := bench.Run(ctx, cfg) // ctx's end stops it; res holds what was measured
//	res.WriteMarkdown(os.Stdout)
//	paths, err := res.WriteDir("bench-out") // results.json, results.csv, *.svg
//
// The package's tests run every scenario on meshes of a few nodes (Tiny);
// GPUMESH_SCALE=1 runs the default sizes.
package bench
