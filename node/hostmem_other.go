//go:build !linux

package node

// hostMemory is not read off Linux, where no sandbox would enforce a
// memory cap anyway.
func hostMemory() (int64, error) { return 0, errHostMemoryUnknown }
