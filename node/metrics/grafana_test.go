package metrics

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

const grafanaDashboard = "../../deploy/grafana/gpumesh.json"

type grafanaPanel struct {
	ID      int            `json:"id"`
	Type    string         `json:"type"`
	Title   string         `json:"title"`
	Panels  []grafanaPanel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// grafanaExprs returns every PromQL expression of the dashboard by panel
// title, and checks the panels' IDs are unique.
func grafanaExprs(t *testing.T) map[string][]string {
	t.Helper()
	data, err := os.ReadFile(grafanaDashboard)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string         `json:"title"`
		UID    string         `json:"uid"`
		Panels []grafanaPanel `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("%s: %v", grafanaDashboard, err)
	}
	if dash.Title == "" || dash.UID == "" {
		t.Fatalf("%s: no title or uid", grafanaDashboard)
	}
	out := map[string][]string{}
	ids := map[int]string{}
	var walk func([]grafanaPanel)
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			if other, dup := ids[p.ID]; dup {
				t.Errorf("panels %q and %q share id %d", other, p.Title, p.ID)
			}
			ids[p.ID] = p.Title
			for _, tg := range p.Targets {
				out[p.Title] = append(out[p.Title], tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	if len(out) < 10 {
		t.Fatalf("%s: only %d panels with queries", grafanaDashboard, len(out))
	}
	return out
}

// TestGrafanaDashboardUsesServedMetrics fails when a dashboard query names
// a gpumesh_* metric the node does not serve (renamed or never written), and
// when a served gpumesh_* family has no panel.
func TestGrafanaDashboardUsesServedMetrics(t *testing.T) {
	m := newTestMetrics(t, newFakeGossip())
	m.SetStatus(fixtureStatus(time.Now()))
	m.ObservePlacement(time.Now(), time.Second)
	m.ObserveReroute(time.Now(), time.Second)
	mfs, err := m.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	for _, mf := range mfs {
		served[mf.GetName()] = true
	}
	used := map[string]bool{}
	name := regexp.MustCompile(`gpumesh_[a-z_]+`)
	for title, exprs := range grafanaExprs(t) {
		for _, e := range exprs {
			for _, n := range name.FindAllString(e, -1) {
				base := n
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(n, suffix); ok && served[b] {
						base = b
					}
				}
				if !served[base] {
					t.Errorf("panel %q queries %s, which /metrics does not serve", title, n)
				}
				used[base] = true
			}
		}
	}
	for n := range served {
		if strings.HasPrefix(n, "gpumesh_") && !used[n] {
			t.Errorf("%s is served but no dashboard panel shows it", n)
		}
	}
}

// TestGrafanaQueriesParse checks every query's PromQL with promtool (as
// recording rules), Grafana's $__range standing in as 1h.
func TestGrafanaQueriesParse(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (Debian package prometheus): skipping the dashboard's PromQL check")
	}
	var rules strings.Builder
	rules.WriteString("groups:\n- name: grafana\n  rules:\n")
	i := 0
	for _, exprs := range grafanaExprs(t) {
		for _, e := range exprs {
			e = strings.ReplaceAll(e, "$__range", "1h")
			quoted, _ := json.Marshal(e) // a JSON string is a YAML string
			fmt.Fprintf(&rules, "  - record: grafana:query_%d\n    expr: %s\n", i, quoted)
			i++
		}
	}
	path := filepath.Join(t.TempDir(), "rules.yml")
	if err := os.WriteFile(path, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	t.Logf("%d dashboard queries parse", i)
}
