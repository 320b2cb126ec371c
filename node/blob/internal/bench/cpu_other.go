//go:build !unix

package bench

import "time"

// CPU returns 0 where the process's CPU time is not read.
func CPU() time.Duration { return 0 }
