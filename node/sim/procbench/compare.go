package procbench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/gpumesh/gpumesh/internal/text"
	"github.com/gpumesh/gpumesh/node/sim/bench"
)

// DefaultRuns is how many runs of each binary Compare makes by default.
const DefaultRuns = 3

// CompareConfig configures Compare: the processes scenario of Config, run
// Runs times with Config.Binary and as many with Baseline, interleaved on
// the same machine.
type CompareConfig struct {
	Config
	// Baseline is the gpumesh binary to compare Binary with: a build of
	// the code before a change.
	Baseline string
	// Runs is how many runs each binary makes. Default DefaultRuns.
	Runs int
}

func (c CompareConfig) withDefaults() CompareConfig {
	if c.Runs == 0 {
		c.Runs = DefaultRuns
	}
	return c
}

// Validate checks the scenario's configuration, the runs and the baseline.
// Each run keeps no data dir and writes no profile: they would be one
// run's.
func (c CompareConfig) Validate() error {
	c = c.withDefaults()
	if err := c.Config.Validate(); err != nil {
		return err
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrBadConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case c.Runs < 1:
		return bad("--runs %d: want at least 1 run of each binary", c.Runs)
	case c.Baseline == "":
		return bad("--baseline: name the gpumesh binary to compare with")
	case c.KeepDir || c.ProfileDir != "":
		return bad("--keep and --profile are one run's: leave them out of a comparison")
	}
	if st, err := os.Stat(c.Baseline); err != nil {
		return bad("--baseline %s: %v", c.Baseline, err)
	} else if st.IsDir() || st.Mode()&0o111 == 0 {
		return bad("--baseline %s: not an executable file", c.Baseline)
	}
	return nil
}

// Compare runs the processes scenario with Binary and with Baseline, Runs
// times each, and returns three rows per figure: Binary's median, the
// baseline's ("METRIC, baseline") and their ratio ("METRIC, this ÷
// baseline"); each row's note lists every run's figure. Machines shared with other work drift over minutes,
// so the runs alternate, and each round swaps which binary goes first.
// An error, or Ctrl-C, ends the comparison with what the runs so far
// measured.
func Compare(ctx context.Context, cfg CompareConfig) (*bench.Results, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	var mine, base []*bench.Results
	var runErr error
rounds:
	for i := range cfg.Runs {
		type side struct {
			bin, who string
			runs     *[]*bench.Results
		}
		order := []side{{cfg.Binary, "this binary", &mine}, {cfg.Baseline, "baseline", &base}}
		if i%2 == 1 {
			slices.Reverse(order)
		}
		for _, sd := range order {
			c := cfg.Config
			c.Binary = sd.bin
			if p := cfg.Progress; p != nil {
				c.Progress = func(line string) { p(fmt.Sprintf("%s, run %d of %d: %s", sd.who, i+1, cfg.Runs, line)) }
				p(fmt.Sprintf("%s, run %d of %d (%s)", sd.who, i+1, cfg.Runs, sd.bin))
			}
			res, err := Run(ctx, c)
			if res != nil {
				*sd.runs = append(*sd.runs, res)
			}
			if res == nil || err != nil || ctx.Err() != nil || res.Interrupted {
				runErr = err
				break rounds // after Ctrl-C the nodes stop in the background
			}
			<-res.Stopped() // every node of this run is gone before the next starts
		}
	}
	if len(mine) == 0 {
		if runErr == nil {
			runErr = ctx.Err()
		}
		return nil, runErr
	}
	return compared(mine, base, cfg.Baseline), runErr
}

// compared folds the results of the runs of each binary into one
// comparison (Compare).
func compared(mine, base []*bench.Results, baseline string) *bench.Results {
	first := mine[0]
	out := &bench.Results{Started: first.Started, Machine: first.Machine, Scenarios: []string{Scenario},
		Setup: fmt.Sprintf("%s; this binary against %s, runs interleaved: %d of this binary, %d of the baseline; each row is this binary's median",
			first.Setup, baseline, len(mine), len(base))}
	type key struct{ scenario, kase, clock, metric, unit string }
	keyOf := func(r bench.Row) key { return key{r.Scenario, r.Case, r.Clock, r.Metric, r.Unit} }
	values := func(runs []*bench.Results, k key) []float64 {
		var vs []float64
		for _, res := range runs {
			for _, r := range res.Rows {
				if keyOf(r) == k {
					vs = append(vs, r.Value)
					break
				}
			}
		}
		return vs
	}
	var seen []key
	for _, res := range mine {
		for _, r := range res.Rows {
			if k := keyOf(r); !slices.Contains(seen, k) {
				seen = append(seen, k)
			}
		}
	}
	for _, k := range seen {
		vm, vb := values(mine, k), values(base, k)
		row := func(metric, unit string, vs []float64, who string) bench.Row {
			return bench.Row{Scenario: k.scenario, Case: k.kase, Clock: k.clock, Metric: metric, Unit: unit, N: len(vs), Value: median(vs),
				Note: fmt.Sprintf("%s, median of %s: %s", who, text.Count(len(vs), "run"), figures(vs, unit))}
		}
		out.Rows = append(out.Rows, row(k.metric, k.unit, vm, "this binary"))
		if len(vb) == 0 {
			continue
		}
		out.Rows = append(out.Rows, row(k.metric+", baseline", k.unit, vb, "the baseline"))
		if mb := median(vb); mb != 0 {
			out.Rows = append(out.Rows, bench.Row{Scenario: k.scenario, Case: k.kase, Metric: k.metric + ", this ÷ baseline",
				Value: median(vm) / mb, Note: "the ratio of the medians"})
		}
	}
	for _, side := range []struct {
		who  string
		runs []*bench.Results
	}{{"this binary", mine}, {"baseline", base}} {
		for i, res := range side.runs {
			out.Took += res.Took
			out.Interrupted = out.Interrupted || res.Interrupted
			for _, n := range res.Notes {
				out.Notes = append(out.Notes, fmt.Sprintf("%s, run %d: %s", side.who, i+1, n))
			}
		}
	}
	return out
}

// median is the median of vs (the upper one of an even count); 0 for none.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	return s[len(s)/2]
}

// figures prints every run's figure, in run order.
func figures(vs []float64, unit string) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = bench.FormatValue(v, unit)
	}
	return strings.Join(s, ", ")
}
