//go:build unix

package blob

import "syscall"

// openNoBlock opens a file without waiting: a named pipe swapped in for a
// file must not stall Put.
const openNoBlock = syscall.O_NONBLOCK
