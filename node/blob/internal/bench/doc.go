// Package bench holds what the blob benchmarks share: synthetic trees of
// deterministic pseudo-random data with a share of their bytes changed,
// the size they are run at, and a watch on the process's peak memory. It
// is used by benchmarks only.
package bench
