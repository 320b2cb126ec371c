//go:build !linux

package executor

import "errors"

// newSandbox reports that this platform has no sandbox: namespaces and
// cgroups are Linux features.
func newSandbox(Config) (isolator, error) {
	return nil, errors.New("the sandbox needs Linux (namespaces and cgroups)")
}
