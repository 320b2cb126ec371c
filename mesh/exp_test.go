package mesh

import (
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"
)

func TestExpKill(t *testing.T) {
	f, _ := os.Create("/tmp/scale.log")
	defer f.Close()
	scaleLogger = slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelInfo}))
	sm := buildSimMesh(t, 100, FastProfile(), 3*time.Minute)
	t.Logf("converged in %v", sm.converge)
	time.Sleep(5 * time.Second)
	for k := 0; k < 3; k++ {
		victim := sm.nodes[len(sm.nodes)-1]
		sm.nodes = sm.nodes[:len(sm.nodes)-1]
		id := victim.ID()
		start := time.Now()
		sm.sim.Crash(id)
		seen := map[int]time.Duration{}
		for len(seen) < len(sm.nodes) && time.Since(start) < 60*time.Second {
			for i, m := range sm.nodes {
				if _, ok := seen[i]; !ok && stateOf(m, id) == StateDead {
					seen[i] = time.Since(start)
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
		var ds []time.Duration
		for _, d := range seen {
			ds = append(ds, d.Round(10*time.Millisecond))
		}
		slices.Sort(ds)
		t.Logf("kill %d: %d/%d saw dead; first %v median %v p90 %v last %v", k, len(ds), len(sm.nodes), ds[0], ds[len(ds)/2], ds[len(ds)*9/10], ds[len(ds)-1])
		time.Sleep(3 * time.Second)
	}
}
