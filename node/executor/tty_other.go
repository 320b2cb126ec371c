//go:build !unix

package executor

import (
	"os"
	"os/exec"
)

// Jobs do not run on this platform (Start fails first); these keep the
// package building for owners' laptops.
func startInGroup(*exec.Cmd, bool, uint16, uint16) (*os.File, error) { return nil, ErrUnsupported }

func setTTYSize(*os.File, uint16, uint16) error { return ErrUnsupported }
