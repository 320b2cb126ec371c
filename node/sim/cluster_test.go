package sim

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// Interrupted while its nodes start (Ctrl-C on gpumesh bench or demo),
// StartCluster is back within 2 s, with every node it started stopped:
// the nodes are cut off as by a power cut, not left one graceful leave
// (up to 3 s) after another.
func TestStartClusterInterruptedStopsWithinTwoSeconds(t *testing.T) {
	plan, _ := PlanSuppliers(40, DefaultMix(), 3)
	plan = WithControllers(plan, 3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var once sync.Once
	stopped := make(chan time.Time, 1)
	_, err := StartCluster(ctx, ClusterConfig{Suppliers: plan, Dir: t.TempDir(), StartWorkers: 4,
		OnStarted: func(up, _ int) {
			if up >= 12 {
				once.Do(func() { stopped <- time.Now(); cancel() })
			}
		}})
	back := time.Now()
	var se *StartError
	if !errors.As(err, &se) || !errors.Is(err, context.Canceled) {
		t.Fatalf("StartCluster: %v, want a StartError for the interrupt", err)
	}
	if se.Up < 12 {
		t.Errorf("%d nodes up when interrupted, want 12 or more", se.Up)
	}
	took := back.Sub(<-stopped)
	t.Logf("back %v after the interrupt, with %d nodes up", took.Round(10*time.Millisecond), se.Up)
	if took > 2*time.Second && !raceDetector {
		t.Errorf("back %v after the interrupt, with %d nodes up; want within 2 s", took.Round(10*time.Millisecond), se.Up)
	}
}
