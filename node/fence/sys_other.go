//go:build !unix

package fence

import (
	"errors"
	"fmt"
	"os/exec"
	"runtime"
)

// supported tells whether the keeper can run here: it needs process groups.
const supported = false

var errUnsupported = fmt.Errorf("fence keeper on %s: %w: no process groups", runtime.GOOS, errors.ErrUnsupported)

func killTarget(target, func(int) bool) error { return errUnsupported }

func protectedGroups() func(pgid int) bool { return func(int) bool { return true } }

func ignoreSignals() {}

func setProcessGroup(*exec.Cmd) {}
