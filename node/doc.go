// Package node is the gpumesh daemon: it wires mesh, gossip, market and device
// together, owns every goroutine of a running node, runs the jobs the node wins
// (the executor), keeps state on disk, and serves the local API, metrics and
// dashboard.
package node
