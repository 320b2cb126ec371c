//go:build !unix

package receipts

import "time"

// cpuTime is not measured here.
func cpuTime() time.Duration { return 0 }
