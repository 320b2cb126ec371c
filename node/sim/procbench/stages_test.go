package procbench

import (
	"math"
	"strings"
	"testing"
)

func TestParseStagesSumsNodesAndEstimatesMedians(t *testing.T) {
	node := `# HELP gpumesh_job_stage_seconds Time ...
# TYPE gpumesh_job_stage_seconds histogram
gpumesh_job_stage_seconds_bucket{stage="persist",le="0.001"} 0
gpumesh_job_stage_seconds_bucket{stage="persist",le="0.002"} 5
gpumesh_job_stage_seconds_bucket{stage="persist",le="0.004"} 10
gpumesh_job_stage_seconds_bucket{stage="persist",le="+Inf"} 10
gpumesh_job_stage_seconds_sum{stage="persist"} 0.025
gpumesh_job_stage_seconds_count{stage="persist"} 10
gpumesh_placement_duration_seconds_count 3
`
	out := map[string]*stageHist{}
	for range 2 {
		if err := parseStages(strings.NewReader(node), out); err != nil {
			t.Fatal(err)
		}
	}
	h := out["persist"]
	if h == nil || h.count != 20 || math.Abs(h.sum-0.05) > 1e-9 || len(out) != 1 {
		t.Fatalf("parsed %+v", out)
	}
	// 10 of 20 at or below 2 ms: the median is the bucket's top.
	if q := h.quantile(0.5); math.Abs(q-0.002) > 1e-9 {
		t.Errorf("median %v, want 0.002", q)
	}
	if q := h.quantile(0.75); math.Abs(q-0.003) > 1e-9 {
		t.Errorf("p75 %v, want 0.003 (halfway into the 2–4 ms bucket)", q)
	}
	if err := parseStages(strings.NewReader(`gpumesh_job_stage_seconds_sum{stage="x"} nope`+"\n"), out); err == nil {
		t.Error("a bad value was accepted")
	}
	if !math.IsNaN((&stageHist{}).quantile(0.5)) {
		t.Error("an empty histogram has a median")
	}
}
