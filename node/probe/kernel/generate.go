// Package kernel holds the verification probe's GPU kernels: probe.ll, in
// LLVM IR, and probe.ptx, the PTX that LLVM's NVPTX back end makes of it
// (committed, embedded by node/probe; the CUDA driver compiles PTX for the
// card at run time, so no CUDA toolkit is needed to build or run gpumesh).
// Regenerate probe.ptx after changing probe.ll with `go generate
// ./node/probe/kernel/` (needs opt and llc, Debian's llvm package; opt
// inlines the helpers, so the kernels make no calls).
package kernel

import _ "embed"

//go:generate sh -c "opt -O2 probe.ll | llc -march=nvptx64 -mcpu=sm_60 -O2 -o probe.ptx"

// PTX is the kernels' PTX: gpumesh_fill, gpumesh_round, gpumesh_digest.
//
//go:embed probe.ptx
var PTX string
