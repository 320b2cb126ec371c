package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
)

// readiness is a Backend whose only reachable method is Ready.
type readiness struct {
	Backend
	checks map[string]error
}

func (r readiness) Ready() map[string]error { return r.checks }

// probe GETs path without a token (the probes need none, even on a node
// that has one) and decodes the JSON body strictly.
func probe(t *testing.T, checks map[string]error, path string) (int, Health) {
	t.Helper()
	srv := httptest.NewServer(Handler(Config{Token: "s3cret"}, readiness{checks: checks}, nil))
	defer srv.Close()
	resp, err := http.Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("GET %s: Content-Type %q", path, ct)
	}
	raw, _ := io.ReadAll(resp.Body)
	var h Health
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		t.Fatalf("GET %s: body %q: %v", path, raw, err)
	}
	t.Logf("GET %s: %d %s", path, resp.StatusCode, raw)
	return resp.StatusCode, h
}

func TestHealthz(t *testing.T) {
	// Liveness does not depend on readiness: an unready node is alive.
	code, h := probe(t, map[string]error{"mesh": errors.New("alone")}, "/healthz")
	if code != http.StatusOK || !reflect.DeepEqual(h, Health{Status: "ok"}) {
		t.Errorf("/healthz: %d %+v, want 200 {status: ok}", code, h)
	}
}

func TestReadyz(t *testing.T) {
	tests := []struct {
		name     string
		checks   map[string]error
		wantCode int
		want     Health
	}{
		{"all pass", map[string]error{"store": nil, "devices": nil, "mesh": nil}, http.StatusOK,
			Health{Status: "ok", Checks: map[string]bool{"store": true, "devices": true, "mesh": true}}},
		{"alone in the mesh", map[string]error{"store": nil, "devices": nil, "mesh": errors.New("alone: no other member alive yet (looking through 1 --join address(es))")},
			http.StatusServiceUnavailable, Health{
				Status:   "unready",
				Checks:   map[string]bool{"store": true, "devices": true, "mesh": false},
				NotReady: map[string]string{"mesh": "alone: no other member alive yet (looking through 1 --join address(es))"},
				Reason:   "mesh: alone: no other member alive yet (looking through 1 --join address(es))",
			}},
		{"two failing, named in order", map[string]error{"store": errors.New("store: /d/state.db: database not open"), "devices": errors.New("cards not read: nvidia (nvml: driver mismatch)"), "mesh": nil},
			http.StatusServiceUnavailable, Health{
				Status:   "unready",
				Checks:   map[string]bool{"store": false, "devices": false, "mesh": true},
				NotReady: map[string]string{"store": "store: /d/state.db: database not open", "devices": "cards not read: nvidia (nvml: driver mismatch)"},
				Reason:   "devices: cards not read: nvidia (nvml: driver mismatch); store: store: /d/state.db: database not open",
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, h := probe(t, tc.checks, "/readyz")
			if code != tc.wantCode || !reflect.DeepEqual(h, tc.want) {
				t.Errorf("/readyz: %d %+v\nwant %d %+v", code, h, tc.wantCode, tc.want)
			}
		})
	}
}
