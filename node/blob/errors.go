package blob

import (
	"errors"
	"fmt"
)

// Sentinel errors of the store.
var (
	// ErrNotFound: the store holds no such object, or no such lease.
	ErrNotFound = errors.New("blob: not found")
	// ErrExists: Writer was asked for an object the store already holds.
	ErrExists = errors.New("blob: already stored")
	// ErrDigestMismatch: bytes did not hash to the digest they were given
	// under. Every *DigestError matches it.
	ErrDigestMismatch = errors.New("blob: digest mismatch")
	// ErrQuota: the store cannot make room for a write. Every *QuotaError
	// matches it.
	ErrQuota = errors.New("blob: store full")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("blob: store closed")
	// ErrLocked: another process has the store's directory open.
	ErrLocked = errors.New("blob: the store directory is in use by another process")
	// ErrNotEmpty: Restore was given a directory that holds something.
	ErrNotEmpty = errors.New("blob: restore directory is not empty")
)

// DigestError reports an object whose bytes do not hash to its name: a
// write that was refused, or a stored object found corrupt (and removed).
type DigestError struct {
	Kind Kind
	Want Digest // the name
	Got  Digest // what the bytes hash to
	Size int64
}

func (e *DigestError) Error() string {
	return fmt.Sprintf("blob: %s %s: %d bytes hash to %s", e.Kind, e.Want, e.Size, e.Got)
}

// Is makes errors.Is(err, ErrDigestMismatch) true.
func (e *DigestError) Is(target error) bool { return target == ErrDigestMismatch }

// SizeError reports a write of another length than announced.
type SizeError struct {
	Kind   Kind
	Digest Digest
	Want   int64
	Got    int64 // bytes written; more than Want when the write overran
}

func (e *SizeError) Error() string {
	return fmt.Sprintf("blob: %s %s: %d bytes written, announced %d", e.Kind, e.Digest, e.Got, e.Want)
}

// QuotaError reports a write that would take the store over its limit
// after collecting everything it may.
type QuotaError struct {
	Need     int64 // bytes of the write refused
	Used     int64 // bytes stored after collection: all held by leases or work in flight
	Reserved int64 // bytes of other writes in flight
	Limit    int64
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("blob: store full: %d more bytes do not fit: %d bytes stored and %d being written are all in use, limit %d",
		e.Need, e.Used, e.Reserved, e.Limit)
}

// Is makes errors.Is(err, ErrQuota) true.
func (e *QuotaError) Is(target error) bool { return target == ErrQuota }

// MissingError reports a manifest whose chunks are not all in the store.
type MissingError struct {
	Manifest Digest
	Chunks   int   // chunks missing
	Bytes    int64 // their total size
	First    Digest
}

func (e *MissingError) Error() string {
	return fmt.Sprintf("blob: manifest %s: %d chunks (%d bytes) not in the store, the first %s", e.Manifest, e.Chunks, e.Bytes, e.First)
}

// Is makes errors.Is(err, ErrNotFound) true.
func (e *MissingError) Is(target error) bool { return target == ErrNotFound }

// PathError reports a path inside a tree that cannot be taken: one that
// does not exist, is a symbolic link, is not a file or directory, or is
// not a path a manifest may hold ("..", absolute). It matches
// fs.ErrNotExist for a path that does not exist.
type PathError struct {
	Path   string
	Reason string
	Err    error // the cause, when there is one
}

func (e *PathError) Error() string { return fmt.Sprintf("%q %s", clip(e.Path), e.Reason) }

// Unwrap returns the cause.
func (e *PathError) Unwrap() error { return e.Err }
