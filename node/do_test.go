package node

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A caller of do that gives up while its function waits for the driver
// gets the error, and the function never runs: it cannot write what the
// caller already read (a data race the race detector found in localJob)
// or carry out a request answered with an error.
func TestDoThatGivesUpNeverRuns(t *testing.T) {
	n := &Node{inputs: make(chan func(), 4)}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	defer n.cancel()
	release := make(chan struct{})
	driverDone := make(chan struct{})
	go func() { // the driver, busy with something else until released
		defer close(driverDone)
		<-release
		for {
			select {
			case f := <-n.inputs:
				f()
			default:
				return
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	ran := false
	if err := n.do(ctx, func() { ran = true }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("do = %v, want the caller's deadline", err)
	}
	close(release)
	<-driverDone
	if ran {
		t.Error("the function ran after its caller had given up")
	}

	// One the driver takes in time runs, and do reports it.
	go func() {
		f := <-n.inputs
		f()
	}()
	ran = false
	if err := n.do(context.Background(), func() { ran = true }); err != nil || !ran {
		t.Errorf("do = %v, ran %v; want nil and ran", err, ran)
	}
}
