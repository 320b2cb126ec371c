package procbench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// stageHist is gpumesh_job_stage_seconds of one stage, summed over the
// nodes: cumulative counts by upper bound, the count and the sum.
type stageHist struct {
	le    []float64
	cum   []float64
	count float64
	sum   float64
}

// stages reads every node's /metrics and sums the job stage histograms by
// stage.
func (c *cluster) stages(ctx context.Context) (map[string]*stageHist, error) {
	out := map[string]*stageHist{}
	for _, p := range c.procs {
		if err := c.readMetrics(ctx, p, func(r io.Reader) error { return parseStages(r, out) }); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// parseStages adds the gpumesh_job_stage_seconds lines of a Prometheus
// text exposition to out.
func parseStages(r io.Reader, out map[string]*stageHist) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, "gpumesh_job_stage_seconds_")
		if !ok {
			continue
		}
		kind, rest, ok := strings.Cut(rest, "{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return fmt.Errorf("line %q: %v", line, err)
		}
		stage, le := "", ""
		for _, kv := range strings.Split(labels, ",") {
			k, val, _ := strings.Cut(kv, "=")
			val = strings.Trim(val, `"`)
			switch k {
			case "stage":
				stage = val
			case "le":
				le = val
			}
		}
		h := out[stage]
		if h == nil {
			h = &stageHist{}
			out[stage] = h
		}
		switch kind {
		case "sum":
			h.sum += v
		case "count":
			h.count += v
		case "bucket":
			bound := math.Inf(1)
			if le != "+Inf" {
				if bound, err = strconv.ParseFloat(le, 64); err != nil {
					return fmt.Errorf("line %q: %v", line, err)
				}
			}
			if i := slices.Index(h.le, bound); i >= 0 {
				h.cum[i] += v
			} else {
				h.le = append(h.le, bound)
				h.cum = append(h.cum, v)
			}
		}
	}
	return sc.Err()
}

// quantile estimates the q-quantile from the buckets as Prometheus's
// histogram_quantile does: linear within the bucket it falls in.
func (h *stageHist) quantile(q float64) float64 {
	if h.count == 0 || len(h.le) == 0 {
		return math.NaN()
	}
	idx := make([]int, len(h.le))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int {
		switch {
		case h.le[a] < h.le[b]:
			return -1
		case h.le[a] > h.le[b]:
			return 1
		}
		return 0
	})
	rank := q * h.count
	lower, below := 0.0, 0.0
	for _, i := range idx {
		if h.cum[i] >= rank {
			if math.IsInf(h.le[i], 1) {
				return lower // beyond the last bound: its lower edge
			}
			in := h.cum[i] - below
			if in <= 0 {
				return h.le[i]
			}
			return lower + (h.le[i]-lower)*(rank-below)/in
		}
		lower, below = h.le[i], h.cum[i]
	}
	return lower
}
