//go:build !linux

package executor

// mountUnder finds nothing: the executor mounts nothing outside Linux.
func mountUnder(string) (string, error) { return "", nil }
