//go:build !unix

package blob

// openNoBlock is nothing where opening a file does not wait on a named
// pipe's writer (Windows).
const openNoBlock = 0
