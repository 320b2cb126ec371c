package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/node/api"
)

// statusBackend serves one api.Status; the API's other methods are not
// reached by `gpumesh status` (the embedded nil interface would panic).
type statusBackend struct {
	api.Backend
	st api.Status
}

func (b statusBackend) Status(context.Context) (any, error) { return b.st, nil }

func sampleStatus() api.Status {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	st := api.Status{
		At: at,
		Node: api.NodeStatus{
			PeerID: "12D3KooWGzYxeHm6Z3C6cLdS8a8u1yFgdWXbBy6sSz5TrHnE7qS1", Version: "v0.1.0",
			StartedAt: at.Add(-3*time.Hour - 12*time.Minute), UptimeSeconds: 3*3600 + 12*60,
			Reachability: api.ReachabilityPrivate, Region: "cn-east", Coordinator: true,
			Cards: []api.Card{
				{Card: device.Card{ID: "GPU-aaaa", Vendor: "nvidia", Model: "h100-sxm-80g", Health: device.Healthy()}, Healthy: true, State: "running", Job: "j-7f3a9c"},
				{Card: device.Card{ID: "GPU-bbbb", Vendor: "nvidia", Model: "h100-sxm-80g", Health: device.Unhealthy("Xid 79: fallen off the bus")}, Healthy: false, State: "free"},
			},
		},
		Jobs: api.JobsStatus{
			ByState:   map[string]int{"running": 2, "pending": 1, "succeeded": 4},
			Placement: api.PlacementStatus{WindowSeconds: 300, Count: 100, P50Seconds: 0.42, P99Seconds: 1.3},
			Reroutes:  api.RerouteStatus{WindowSeconds: 3600, Count: 3, MedianSeconds: 4},
		},
		Gossip: api.GossipStatus{
			MeshPeers: 4, MessagesPerSecond: 50, BytesInPerSecond: 1500, BytesOutPerSecond: 2.5e6,
			Rejected: map[string]uint64{"bad signature": 2, "malformed": 7},
			Ignored:  map[string]uint64{"stale seq": 3},
		},
		Warnings: []string{"card GPU-bbbb unhealthy: Xid 79", "peer 12D3KooWQ… flapping: 6 state changes in 10m"},
	}
	st.Earnings = &api.Earnings{
		Today: api.Earned{CNY: 12.34, CardSeconds: 2 * 3600}, Week: api.Earned{CNY: 80.5, CardSeconds: 13 * 3600}, Total: api.Earned{CNY: 310, CardSeconds: 50 * 3600},
		Since: time.Date(2026, 11, 2, 9, 0, 0, 0, time.Local),
		ByModel: []api.ModelEarned{
			{Model: "h100-sxm-80g", Today: api.Earned{CNY: 12.34}, Week: api.Earned{CNY: 77.5}, Total: api.Earned{CNY: 300}},
			{Model: "rtx4090-48g", Week: api.Earned{CNY: 3}, Total: api.Earned{CNY: 10}},
		},
	}
	st.Mesh.Members = api.MemberCounts{Alive: 3, Suspect: 1, Dead: 1}
	st.Mesh.AddCards(api.Capacity{Model: "h100-sxm-80g", Vendor: "nvidia", Free: 6, Reserved: 1, Busy: 1})
	st.Mesh.AddCards(api.Capacity{Model: "mtt-s4000-48g", Vendor: "mthreads", Busy: 4})
	st.Mesh.AddRegion("cn-east", 8)
	st.Mesh.AddRegion("cn-north", 4)
	return st
}

// statusServer serves st through the real API handler, with token if set.
func statusServer(t *testing.T, st api.Status, token string) string {
	t.Helper()
	srv := httptest.NewServer(api.Handler(api.Config{Token: token}, statusBackend{st: st}, nil))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// runStatus runs `gpumesh args...` with the given environment.
func runStatus(t *testing.T, environ map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := runEnv(context.Background(), args, env{
		stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr,
		getenv: func(k string) string { return environ[k] },
	})
	return code, stdout.String(), stderr.String()
}

func TestStatusScreen(t *testing.T) {
	addr := statusServer(t, sampleStatus(), "")
	code, out, errOut := runStatus(t, nil, "status", "--api", addr)
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{
		"NODE   12D3KooWGzYxeHm6Z3C6cLdS8a8u1yFgdWXbBy6sSz5TrHnE7qS1\n",
		"version v0.1.0 · up 3h12m · reachability private (behind NAT: reached through relays) · region cn-east · coordinator\n",
		"CARDS  h100-sxm-80g  GPU-aaaa  running j-7f3a9c  ok\n",
		"h100-sxm-80g  GPU-bbbb  free              UNHEALTHY: Xid 79: fallen off the bus\n",
		"EARNED today 12.34 CNY (2.0 card-hours) · this week 80.50 CNY (13.0 card-hours) · in all 310.00 CNY (50.0 card-hours) since 2026-11-02\n",
		"       MODEL              TODAY   THIS WEEK      IN ALL\n",
		"       h100-sxm-80g       12.34       77.50      300.00\n",
		"       rtx4090-48g         0.00        3.00       10.00\n",
		"MESH   5 members: 3 alive, 1 suspect, 1 dead, 0 left\n",
		"regions: cn-east 1 member, 8 cards · cn-north 1 member, 4 cards\n",
		"cards: 12 total, 6 free, 1 reserved, 5 busy\n",
		"       MODEL           VENDOR    TOTAL   FREE  RESERVED   BUSY\n",
		"       h100-sxm-80g    nvidia        8      6         1      1\n",
		"       (all nvidia)                  8      6         1      1\n",
		"JOBS   coordinated here: pending 1 · running 2 · succeeded 4\n",
		"placement (last 5m): 100 jobs, p50 420ms, p99 1.30s\n",
		"reroutes (last 1h): 3, median 4.00s to run again\n",
		"GOSSIP 4 mesh peers · 50.0 msg/s · in 1.5 kB/s · out 2.5 MB/s\n",
		"rejected: malformed 7, bad signature 2\n",
		"ignored: stale seq 3\n",
		"WARNINGS\n  ! card GPU-bbbb unhealthy: Xid 79\n  ! peer 12D3KooWQ… flapping: 6 state changes in 10m\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("screen lacks %q", want)
		}
	}
	t.Logf("screen:\n%s", out)
}

func TestStatusQuietMesh(t *testing.T) {
	// A node alone, nothing placed, nothing wrong.
	st := api.Status{Node: api.NodeStatus{PeerID: "12D3KooWA", Version: "devel", UptimeSeconds: 42}, Warnings: []string{}, Earnings: &api.Earnings{}}
	st.Mesh.Members.Alive = 1
	code, out, _ := runStatus(t, nil, "status", "--api", statusServer(t, st, ""))
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{
		"up 42s · reachability unknown\n", "no cards\n", "EARNED nothing yet: this node offers no cards\n", "MESH   1 member: 1 alive",
		"JOBS   none coordinated here\n", "no jobs placed\n", "reroutes (last 0s): none\n",
		"rejected: none\n", "WARNINGS none\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("screen lacks %q\n%s", want, out)
		}
	}
}

func TestStatusJSON(t *testing.T) {
	st := sampleStatus()
	addr := statusServer(t, st, "")
	code, out, _ := runStatus(t, map[string]string{"GPUMESH_API": addr}, "status", "--json")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	var got api.Status
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out)
	}
	if got.Node.PeerID != st.Node.PeerID || got.Mesh.Cards != st.Mesh.Cards || got.Jobs.Placement != st.Jobs.Placement ||
		len(got.Warnings) != 2 || got.Gossip.Rejected["malformed"] != 7 {
		t.Errorf("--json round trip lost data: %+v", got)
	}
}

func TestStatusToken(t *testing.T) {
	addr := statusServer(t, sampleStatus(), "tok-123")
	code, _, errOut := runStatus(t, nil, "status", "--api", addr)
	if code != exitError || !strings.Contains(errOut, "missing or wrong API token (give the token with --api-token-file or GPUMESH_API_TOKEN)") {
		t.Errorf("no token: exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = runStatus(t, map[string]string{"GPUMESH_API_TOKEN": "bad-tok-xyz"}, "status", "--api", addr)
	if code != exitError || !strings.Contains(errOut, "missing or wrong API token") || strings.Contains(errOut, "bad-tok-xyz") {
		t.Errorf("wrong token: exit %d, stderr %q (must not echo the token)", code, errOut)
	}
	code, out, errOut := runStatus(t, map[string]string{"GPUMESH_API_TOKEN": "tok-123"}, "status", "--api", "http://"+addr)
	if code != 0 || !strings.Contains(out, "MESH   5 members") {
		t.Errorf("token from the environment: exit %d, stderr %q", code, errOut)
	}
	// The same API flags as every client command: --api-token-file, which
	// wins over the environment.
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good"), filepath.Join(dir, "bad")
	os.WriteFile(good, []byte("tok-123\n"), 0o600)
	os.WriteFile(bad, []byte("bad-tok-xyz\n"), 0o600)
	code, out, errOut = runStatus(t, map[string]string{"GPUMESH_API_TOKEN": "bad-tok-xyz"}, "status", "--api", addr, "--api-token-file", good, "--json")
	if code != 0 || !strings.Contains(out, `"peer_id"`) {
		t.Errorf("--api-token-file: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, _, errOut = runStatus(t, map[string]string{"GPUMESH_API_TOKEN": "tok-123"}, "status", "--api", addr, "--api-token-file", bad)
	if code != exitError || !strings.Contains(errOut, "missing or wrong API token") || strings.Contains(errOut, "bad-tok-xyz") {
		t.Errorf("wrong --api-token-file: exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = runStatus(t, nil, "status", "--api", addr, "--api-token-file", filepath.Join(dir, "missing"))
	if code != exitUsage || !strings.Contains(errOut, "--api-token-file: open ") {
		t.Errorf("missing --api-token-file: exit %d, stderr %q", code, errOut)
	}
}

func TestStatusBadInput(t *testing.T) {
	// A port nothing listens on: take one and close it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()

	tests := []struct {
		name     string
		env      map[string]string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"no port", nil, []string{"status", "--api", "localhost"}, exitUsage, `--api: API address "localhost": want host:port`},
		{"path in URL", nil, []string{"status", "--api", "http://127.0.0.1:7070/v1"}, exitUsage, "want host:port with nothing after it"},
		{"bad scheme", nil, []string{"status", "--api", "ftp://127.0.0.1:7070"}, exitUsage, "want an http:// or https:// URL, or host:port"},
		{"bad env", map[string]string{"GPUMESH_API": "nope"}, []string{"status"}, exitUsage, `GPUMESH_API: API address "nope"`},
		{"empty flag", nil, []string{"status", "--api", ""}, exitUsage, "--api: empty address"},
		{"nothing listening", nil, []string{"status", "--api", closed}, exitError, "cannot reach the gpumesh API at " + closed},
		{"extra argument", nil, []string{"status", "now"}, exitUsage, "unknown command"},
		{"unknown flag", nil, []string{"status", "--watch"}, exitUsage, "unknown flag: --watch"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runStatus(t, tc.env, tc.args...)
			if code != tc.wantCode || !strings.Contains(errOut, tc.wantErr) || out != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d, stderr containing %q", code, out, errOut, tc.wantCode, tc.wantErr)
			}
			if strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
				t.Errorf("stderr is not one line: %q", errOut)
			}
		})
	}
}

func TestStatusNonJSONAnswer(t *testing.T) {
	// Something else listens on the port: say so, and what it answered.
	srv := httptest.NewServer(nil) // DefaultServeMux: 404 text
	defer srv.Close()
	code, _, errOut := runStatus(t, nil, "status", "--api", srv.URL)
	if code != exitError || !strings.Contains(errOut, "Not Found: 404 page not found") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

func TestStatusSanitizesPeerStrings(t *testing.T) {
	st := sampleStatus()
	st.Mesh.AddCards(api.Capacity{Model: "x-evil\x1b[2J\nmodel", Vendor: "nv\u009bidia", Free: 1})
	st.Warnings = append(st.Warnings, "multi\nline")
	code, out, _ := runStatus(t, nil, "status", "--api", statusServer(t, st, ""))
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	if strings.ContainsAny(out, "\x1b\u009b") || strings.Contains(out, "x-evil") && !strings.Contains(out, "x-evil [2J model") {
		t.Errorf("control characters reached the screen:\n%q", out)
	}
	if !strings.Contains(out, "  ! multi line\n") {
		t.Errorf("a multi-line warning was not flattened:\n%s", out)
	}
}

func TestFmtHelpers(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{fmtSeconds(42), "42s"}, {fmtSeconds(300), "5m"}, {fmtSeconds(310), "5m10s"},
		{fmtSeconds(3600), "1h"}, {fmtSeconds(3*3600 + 12*60), "3h12m"}, {fmtSeconds(50 * 3600), "2d2h"},
		{fmtLatency(0.0123), "12ms"}, {fmtLatency(1.2), "1.20s"}, {fmtLatency(95), "1m35s"},
		{fmtRate(999), "999 B/s"}, {fmtRate(1500), "1.5 kB/s"}, {fmtRate(2.5e6), "2.5 MB/s"}, {fmtRate(3e9), "3.0 GB/s"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// gpumesh status says whether the node runs images, where the layers it
// pulled came from and how each vendor's cards enter them.
func TestStatusShowsImages(t *testing.T) {
	var b strings.Builder
	writeImages(&b, &api.ImagesStatus{Runtime: "/usr/sbin/runc", PeerBytes: 3 << 30, PeerLayers: 6, RegistryBytes: 1536 << 20, RegistryLayers: 3,
		CachedLayers: 2, Pulls: 2, Unpacks: 1, RootfsBytes: 5 << 30, Cards: []api.CardPath{
			{Vendor: "amd", Via: "built-in", Detail: "no CDI spec in /etc/cdi or /var/run/cdi names amd.com devices"},
			{Vendor: "nvidia", Via: "cdi", Detail: "nvidia.com/gpu=0 from /etc/cdi/nvidia.yaml"}}})
	for _, want := range []string{"IMAGES runs them with /usr/sbin/runc · 2 pulls, 1 unpacked", "from peers (6)", "from registries (3), 2 cached",
		"\n       amd cards enter by built-in rules: no CDI spec in /etc/cdi or /var/run/cdi names amd.com devices\n",
		"\n       nvidia cards enter through CDI: nvidia.com/gpu=0 from /etc/cdi/nvidia.yaml\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	writeImages(&b, &api.ImagesStatus{NoImages: "no working OCI runtime: crun is not installed"})
	if !strings.Contains(b.String(), "IMAGES runs none: no working OCI runtime: crun is not installed") {
		t.Errorf("status:\n%s", b.String())
	}
}
