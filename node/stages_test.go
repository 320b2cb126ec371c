package node

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/metrics"
)

// stageCount is how many jobs n's histogram holds for stage s.
func stageCount(t *testing.T, n *Node, s metrics.Stage) uint64 {
	t.Helper()
	mfs, err := n.obs.m.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "gpumesh_job_stage_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelOf(m, "stage") == string(s) {
				return m.GetHistogram().GetSampleCount()
			}
		}
	}
	return 0
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// syncWriter is a log sink the test reads while the nodes write.
type syncWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// A job placed through the API is timed stage by stage: the node that took
// the request times the API and the signature, the coordinator its queue,
// persist, replicate, bid window, award and first renewal, the supplier
// the start; and the coordinator logs one debug line with the job's
// stages.
func TestJobStagesAreTimedWhereTheyHappen(t *testing.T) {
	logs := &syncWriter{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	sm := newSimMeshWith(t, withAPI(func(_ int, c *Config) { c.Logger = logger }), "", "", "", "a100-80g:1")
	runner := sm.nodes[3]
	sm.neverCoordinate(runner)
	for _, n := range sm.nodes[:3] {
		sm.waitBook(n, 1)
	}
	entry := sm.nodes[0]
	rec, err := apiClient(t, entry, testOwner(0)).Submit(context.Background(), sleeper("timed"))
	if err != nil {
		t.Fatal(err)
	}
	coord := sm.byID(rec.Coordinator)
	waitState(t, coord, rec.ID, 20*time.Second, market.JobRunning)
	eventually(t, 20*time.Second, "the coordinator logs the job's stages", func() bool {
		return stagesLine(logs.String(), "timed") != ""
	})
	t.Logf("LOGS %d %s", len(logs.String()), logs.String()[:min(3000, len(logs.String()))])
	eventually(t, 1*time.Second, "x", func() bool {
		return true
	})
	for _, st := range []metrics.Stage{metrics.StageQueue, metrics.StagePersist, metrics.StageReplicate, metrics.StageBidWindow, metrics.StageAward, metrics.StageFirstRenewal, metrics.StageSignature} {
		if stageCount(t, coord, st) == 0 {
			t.Errorf("the coordinator timed no %s stage", st)
		}
	}
	for _, st := range []metrics.Stage{metrics.StageAPI, metrics.StageSignature} {
		if stageCount(t, entry, st) == 0 {
			t.Errorf("the node that took the request timed no %s stage", st)
		}
	}
	if stageCount(t, runner, metrics.StageStart) != 1 {
		t.Errorf("the supplier timed %d starts, want 1", stageCount(t, runner, metrics.StageStart))
	}
	line := stagesLine(logs.String(), "timed")
	for _, w := range []string{"queue_ms=", "persist_ms=", "replicate_ms=", "bid_window_ms=", "award_ms=", "first_renewal_ms=", "total_ms="} {
		if !strings.Contains(line, w) || strings.Contains(line, w+"-1") {
			t.Errorf("the stages line %q lacks %s", line, w)
		}
	}
}

// stagesLine is the "job stages" log line of job, "" when there is none.
func stagesLine(logs, job string) string {
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, `msg="job stages"`) && strings.Contains(l, " job="+job+" ") {
			return l
		}
	}
	return ""
}
