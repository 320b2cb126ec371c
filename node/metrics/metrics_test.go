package metrics

import (
	"bytes"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/mesh"
	"github.com/gpumesh/gpumesh/node/api"
)

func newTestMetrics(t *testing.T, fg *fakeGossip) *Metrics {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Version = "v0.1.0"
	if fg != nil {
		cfg.Gossip = fg.stats
	}
	cfg.Network = func() (uint64, uint64) { return 5000, 7000 }
	cfg.Membership = func() mesh.Stats { return mesh.Stats{PacketsReceived: 100, SendDrops: 1} }
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// scrape fetches /metrics as Prometheus would (text format).
func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	req, _ := http.NewRequest("GET", srv.URL, nil)
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, body)
	}
	return string(body)
}

// gathered returns the value of the sample of family name with exactly the
// given labels, and whether there is one.
func gathered(t *testing.T, m *Metrics, name string, labels ...string) (float64, bool) {
	t.Helper()
	mfs, err := m.Gatherer().Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, s := range mf.GetMetric() {
			if len(s.GetLabel()) != len(want) {
				continue
			}
			for _, l := range s.GetLabel() {
				if want[l.GetName()] != l.GetValue() {
					continue next
				}
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				return s.GetCounter().GetValue(), true
			case dto.MetricType_GAUGE:
				return s.GetGauge().GetValue(), true
			case dto.MetricType_HISTOGRAM:
				return float64(s.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

func wantSample(t *testing.T, m *Metrics, want float64, name string, labels ...string) {
	t.Helper()
	got, ok := gathered(t, m, name, labels...)
	if !ok {
		t.Errorf("%s%v: no such sample", name, labels)
		return
	}
	if math.Abs(got-want) > 1e-9 {
		t.Errorf("%s%v = %v, want %v", name, labels, got, want)
	}
}

func TestStatusGauges(t *testing.T) {
	m := newTestMetrics(t, nil)
	if _, ok := gathered(t, m, "gpumesh_members", "state", "alive"); ok {
		t.Fatal("gpumesh_members served before any status was set")
	}
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	m.SetStatus(fixtureStatus(at))

	wantSample(t, m, 3, "gpumesh_members", "state", "alive")
	wantSample(t, m, 1, "gpumesh_members", "state", "suspect")
	wantSample(t, m, 1, "gpumesh_members", "state", "dead")
	wantSample(t, m, 0, "gpumesh_members", "state", "left")

	wantSample(t, m, 6, "gpumesh_mesh_cards", "model", "h100-sxm-80g", "vendor", "nvidia", "state", "free")
	wantSample(t, m, 1, "gpumesh_mesh_cards", "model", "h100-sxm-80g", "vendor", "nvidia", "state", "reserved")
	wantSample(t, m, 4, "gpumesh_mesh_cards", "model", "mtt-s4000-48g", "vendor", "mthreads", "state", "busy")

	wantSample(t, m, 1, "gpumesh_node_cards", "model", "h100-sxm-80g", "vendor", "nvidia", "state", "running")
	wantSample(t, m, 1, "gpumesh_node_cards", "model", "h100-sxm-80g", "vendor", "nvidia", "state", "unhealthy")
	wantSample(t, m, 0, "gpumesh_node_cards", "model", "h100-sxm-80g", "vendor", "nvidia", "state", "free")

	wantSample(t, m, 2, "gpumesh_jobs", "state", "running")
	wantSample(t, m, 4, "gpumesh_jobs", "state", "succeeded")
	wantSample(t, m, 0, "gpumesh_jobs", "state", "rerouting")

	wantSample(t, m, 1, "gpumesh_node_reachability", "reachability", "private")
	wantSample(t, m, 0, "gpumesh_node_reachability", "reachability", "public")
	wantSample(t, m, 1, "gpumesh_warnings")
	wantSample(t, m, float64(at.Unix()), "gpumesh_status_timestamp_seconds")
	wantSample(t, m, 1, "gpumesh_build_info", "version", "v0.1.0", "goversion", goVersion())

	// A new status replaces the old one wholesale.
	st := fixtureStatus(at.Add(time.Second))
	st.Mesh.Members.Alive = 7
	st.Jobs.ByState = map[string]int{"weird": 2}
	m.SetStatus(st)
	wantSample(t, m, 7, "gpumesh_members", "state", "alive")
	wantSample(t, m, 0, "gpumesh_jobs", "state", "running")
	wantSample(t, m, 2, "gpumesh_jobs", "state", "other")
}

func TestEventMetrics(t *testing.T) {
	m := newTestMetrics(t, nil)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	m.ObservePlacement(now, 800*time.Millisecond)
	m.ObservePlacement(now, 1200*time.Millisecond)
	m.ObserveReroute(now, 3*time.Second)
	m.CountAuction(OutcomeCleared)
	m.CountAuction(OutcomeCleared)
	m.CountAuction(OutcomeShort)
	m.CountAuction("made-up")
	m.CountLeaseRenewal(RoleRunner)
	m.CountLeaseRenewal(RoleRunner)
	m.CountLeaseMiss(RoleCoordinator)
	m.CountBusy()
	m.ObserveStage(StagePersist, 2*time.Millisecond)
	m.ObserveStage(StagePersist, 3*time.Millisecond)
	m.ObserveStage("nap", time.Second)

	wantSample(t, m, 1, "gpumesh_submissions_busy_total")
	wantSample(t, m, 2, "gpumesh_job_stage_seconds", "stage", "persist")
	wantSample(t, m, 0, "gpumesh_job_stage_seconds", "stage", "first_renewal")
	wantSample(t, m, 1, "gpumesh_job_stage_seconds", "stage", "other")
	wantSample(t, m, 2, "gpumesh_placement_duration_seconds")
	wantSample(t, m, 1, "gpumesh_reroute_duration_seconds")
	wantSample(t, m, 2, "gpumesh_auctions_total", "outcome", "cleared")
	wantSample(t, m, 1, "gpumesh_auctions_total", "outcome", "short")
	wantSample(t, m, 0, "gpumesh_auctions_total", "outcome", "no_candidates")
	wantSample(t, m, 1, "gpumesh_auctions_total", "outcome", "other")
	wantSample(t, m, 2, "gpumesh_lease_renewals_total", "role", "runner")
	wantSample(t, m, 0, "gpumesh_lease_renewals_total", "role", "coordinator")
	wantSample(t, m, 1, "gpumesh_lease_misses_total", "role", "coordinator")

	// The histogram's buckets split at 1 s.
	text := scrape(t, m)
	for _, line := range []string{
		`gpumesh_placement_duration_seconds_bucket{le="0.5"} 0`,
		`gpumesh_placement_duration_seconds_bucket{le="1"} 1`,
		`gpumesh_placement_duration_seconds_bucket{le="2"} 2`,
		`gpumesh_placement_duration_seconds_sum 2`,
	} {
		if !strings.Contains(text, line+"\n") {
			t.Errorf("exposition lacks %q", line)
		}
	}
}

func TestAddBilling(t *testing.T) {
	m := newTestMetrics(t, nil)
	if err := m.AddBilling(SideCharged, 3600, 12.5); err != nil {
		t.Fatal(err)
	}
	if err := m.AddBilling(SideCharged, 60, 0.25); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct {
		side      Side
		secs, cny float64
		msg       string
	}{
		{SideEarned, -1, 0, "card-seconds -1"},
		{SideEarned, 0, math.NaN(), "CNY NaN"},
		{SideEarned, math.Inf(1), 0, "card-seconds +Inf"},
		{"both", 1, 1, `side "both"`},
	} {
		err := m.AddBilling(bad.side, bad.secs, bad.cny)
		if !errors.Is(err, ErrBadAmount) || !strings.Contains(err.Error(), bad.msg) {
			t.Errorf("AddBilling(%q, %v, %v) = %v, want ErrBadAmount naming %q", bad.side, bad.secs, bad.cny, err, bad.msg)
		}
	}
	wantSample(t, m, 12.75, "gpumesh_billed_cny_total", "side", "charged")
	wantSample(t, m, 3660, "gpumesh_billed_card_seconds_total", "side", "charged")
	wantSample(t, m, 0, "gpumesh_billed_cny_total", "side", "earned")
	wantSample(t, m, 0, "gpumesh_billed_card_seconds_total", "side", "earned")
}

func TestGossipAndNetworkCounters(t *testing.T) {
	fg := newFakeGossip()
	m := newTestMetrics(t, fg)
	const capTopic, bidTopic = "/gpumesh/test/capacity/1", "/gpumesh/test/bids/1"
	wantSample(t, m, 40, "gpumesh_gossip_messages_total", "topic", capTopic, "verdict", "accepted", "reason", "none")
	wantSample(t, m, 5, "gpumesh_gossip_messages_total", "topic", capTopic, "verdict", "published", "reason", "none")
	wantSample(t, m, 12, "gpumesh_gossip_messages_total", "topic", capTopic, "verdict", "duplicate", "reason", "none")
	wantSample(t, m, 2, "gpumesh_gossip_messages_total", "topic", capTopic, "verdict", "rejected", "reason", "bad signature")
	wantSample(t, m, 3, "gpumesh_gossip_messages_total", "topic", capTopic, "verdict", "ignored", "reason", "stale seq")
	wantSample(t, m, 7, "gpumesh_gossip_messages_total", "topic", bidTopic, "verdict", "accepted", "reason", "none")
	wantSample(t, m, 4, "gpumesh_gossip_mesh_peers", "topic", capTopic)
	wantSample(t, m, 1000, "gpumesh_gossip_received_bytes_total")
	wantSample(t, m, 2000, "gpumesh_gossip_sent_bytes_total")
	wantSample(t, m, 1, "gpumesh_gossip_dropped_rpcs_total")
	wantSample(t, m, 2, "gpumesh_gossip_book_syncs_total")
	wantSample(t, m, 5000, "gpumesh_network_received_bytes_total")
	wantSample(t, m, 7000, "gpumesh_network_sent_bytes_total")

	// Read at scrape time: the next scrape sees the counters move.
	fg.s.BytesIn = 4000
	wantSample(t, m, 4000, "gpumesh_gossip_received_bytes_total")
}

func TestMembershipCounters(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Runtime = false
	st := mesh.Stats{PacketsSent: 10, PacketsReceived: 12, BytesSent: 1000, BytesReceived: 1200, StreamBytes: 5000,
		SendDrops: 3, ReceiveDrops: 4, Malformed: 1, DialFailures: 2, MetaUpdatesRedone: 5}
	cfg.Membership = func() mesh.Stats { return st }
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wantSample(t, m, 10, "gpumesh_membership_packets_total", "direction", "sent")
	wantSample(t, m, 12, "gpumesh_membership_packets_total", "direction", "received")
	wantSample(t, m, 1000, "gpumesh_membership_bytes_total", "direction", "sent")
	wantSample(t, m, 1200, "gpumesh_membership_bytes_total", "direction", "received")
	wantSample(t, m, 5000, "gpumesh_membership_bytes_total", "direction", "stream")
	wantSample(t, m, 3, "gpumesh_membership_dropped_packets_total", "direction", "send")
	wantSample(t, m, 4, "gpumesh_membership_dropped_packets_total", "direction", "receive")
	wantSample(t, m, 1, "gpumesh_membership_malformed_frames_total")
	wantSample(t, m, 2, "gpumesh_membership_dial_failures_total")
	wantSample(t, m, 5, "gpumesh_membership_metadata_updates_redone_total")
	st.ReceiveDrops = 9 // read at scrape time
	wantSample(t, m, 9, "gpumesh_membership_dropped_packets_total", "direction", "receive")
}

func TestNoGossipSourceLeavesGossipOut(t *testing.T) {
	cfg := DefaultConfig()
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	text := scrape(t, m)
	for _, name := range []string{"gpumesh_gossip_", "gpumesh_network_", "gpumesh_membership_"} {
		if strings.Contains(text, name) {
			t.Errorf("exposition without sources has %s*", name)
		}
	}
	wantSample(t, m, 1, "gpumesh_build_info", "version", "devel", "goversion", goVersion())
}

func TestLabelSetsAreBounded(t *testing.T) {
	m := newTestMetrics(t, nil)
	st := fixtureStatus(time.Now())
	st.Mesh = api.MeshStatus{}
	// A hostile peer advertises 500 made-up models, one card each, next to
	// a large honest H100 pool, and a vendor nobody knows.
	st.Mesh.AddCards(api.Capacity{Model: "h100-sxm-80g", Vendor: "nvidia", Free: 1000})
	for i := range 500 {
		st.Mesh.AddCards(api.Capacity{Model: "x-fake-" + strconv.Itoa(i), Vendor: "evil\xff", Free: 1})
	}
	st.Mesh.AddCards(api.Capacity{Model: "x-" + strings.Repeat("long", 40), Vendor: "nvidia", Free: 1})
	m.SetStatus(st)

	mfs, err := m.Gatherer().Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	models := map[string]bool{}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "gpumesh_mesh_cards" {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "model" {
					models[l.GetValue()] = true
				}
				if len(l.GetValue()) > maxLabelLen {
					t.Errorf("label %s value of %d bytes", l.GetName(), len(l.GetValue()))
				}
				if l.GetName() == "vendor" && l.GetValue() != "nvidia" && l.GetValue() != OtherLabel {
					t.Errorf("vendor label %q", l.GetValue())
				}
			}
			total += s.GetGauge().GetValue()
		}
	}
	if len(models) > maxModels {
		t.Errorf("%d model label values, want at most %d", len(models), maxModels)
	}
	if !models["h100-sxm-80g"] || !models[OtherLabel] {
		t.Errorf("the largest model and %q must keep their labels; have %d models", OtherLabel, len(models))
	}
	if total != 1501 {
		t.Errorf("cards over every label = %v, want 1501 (folding must not lose cards)", total)
	}
}

// TestNoIdentifiersOrSecretsExposed: the exposition carries no job ID, peer
// ID, card ID or warning text, and no label named after them.
func TestNoIdentifiersOrSecretsExposed(t *testing.T) {
	m := newTestMetrics(t, newFakeGossip())
	st := fixtureStatus(time.Now())
	st.Warnings = append(st.Warnings, "token s3cr3t-t0ken leaked into a warning")
	m.SetStatus(st)
	m.CountAuction(OutcomeCleared)
	text := scrape(t, m)
	for _, s := range []string{fixturePeer, fixtureJob, fixtureCardID, "s3cr3t", "Xid 79", "cn-east"} {
		if strings.Contains(text, s) {
			t.Errorf("exposition contains %q", s)
		}
	}
	mfs, _ := m.Gatherer().Gather()
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				switch strings.ToLower(l.GetName()) {
				case "job", "job_id", "peer", "peer_id", "id", "card", "token", "secret", "payload":
					t.Errorf("%s has label %q", mf.GetName(), l.GetName())
				}
			}
		}
	}
}

// TestPromtoolCheckMetrics lints the whole exposition the way CI's promtool
// does: naming conventions, units, _total counters, help strings.
func TestPromtoolCheckMetrics(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (Debian package prometheus): skipping the exposition lint")
	}
	m := newTestMetrics(t, newFakeGossip())
	m.SetStatus(fixtureStatus(time.Now()))
	now := time.Now()
	m.ObservePlacement(now, time.Second)
	m.ObserveReroute(now, 5*time.Second)
	m.CountAuction(OutcomeCleared)
	m.CountLeaseRenewal(RoleRunner)
	m.CountLeaseMiss(RoleRunner)
	if err := m.AddBilling(SideEarned, 10, 1); err != nil {
		t.Fatal(err)
	}
	text := scrape(t, m)
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil || out.Len() > 0 {
		t.Fatalf("promtool check metrics: %v\n%s", err, out.String())
	}
	names := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, "# TYPE gpumesh_"); ok {
			names["gpumesh_"+strings.Fields(rest)[0]] = true
		}
	}
	list := make([]string, 0, len(names))
	for n := range names {
		list = append(list, n)
	}
	sort.Strings(list)
	t.Logf("promtool: %d gpumesh_* families pass: %s", len(list), strings.Join(list, " "))
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, tc := range []struct {
		mut  func(*Config)
		want string
	}{
		{func(c *Config) { c.PlacementWindow = 0 }, "PlacementWindow"},
		{func(c *Config) { c.RerouteWindow = -time.Second }, "RerouteWindow"},
		{func(c *Config) { c.RateWindow = 0 }, "RateWindow"},
		{func(c *Config) { c.WindowSamples = 0 }, "WindowSamples"},
	} {
		cfg := DefaultConfig()
		tc.mut(&cfg)
		if _, err := New(cfg); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New: %v, want ErrInvalidConfig naming %s", err, tc.want)
		}
	}
}

func TestCardStateOutsideTheListIsOther(t *testing.T) {
	m := newTestMetrics(t, nil)
	st := fixtureStatus(time.Now())
	st.Node.Cards = []api.Card{{Card: device.Card{Model: "l40s-48g", Vendor: "nvidia"}, Healthy: true, State: "melting"}}
	m.SetStatus(st)
	wantSample(t, m, 1, "gpumesh_node_cards", "model", "l40s-48g", "vendor", "nvidia", "state", OtherLabel)
	wantSample(t, m, 0, "gpumesh_node_cards", "model", "l40s-48g", "vendor", "nvidia", "state", "free")
}
