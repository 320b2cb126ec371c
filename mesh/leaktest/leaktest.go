// Package leaktest fails a test binary whose goroutines outlive its tests.
//
// memberlist's Shutdown and gossipsub's Close do not wait for all of their
// own goroutines: a probe in flight ends within its ack timeout, a send
// loop when its context is seen. So the check polls until a deadline
// instead of looking once, as goleak.VerifyTestMain does:
//
//	func TestMain(m *testing.M) { leaktest.VerifyMain(m) }
package leaktest

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Grace is how long goroutines get to end after the tests.
const Grace = 5 * time.Second

// VerifyMain runs the tests and then, when they passed, waits up to Grace
// for every goroutine but the ignored ones to end; it exits 1 naming the
// ones left. It does not return.
func VerifyMain(m *testing.M, opts ...goleak.Option) {
	code := m.Run()
	if code == 0 {
		deadline := time.Now().Add(Grace)
		for {
			err := goleak.Find(opts...)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
				code = 1
				break
			}
			time.Sleep(50 * time.Millisecond) // polling interval
		}
	}
	os.Exit(code)
}
