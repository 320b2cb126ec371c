package api

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// backendless is a Backend whose methods must not be reached by the requests
// of these tests: the embedded nil interface panics if they are.
type backendless struct{ Backend }

func TestHandlerServesDashboardBesideAPI(t *testing.T) {
	dash := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "dashboard "+r.URL.Path)
	})
	const token = "s3cret"
	srv := httptest.NewServer(Handler(Config{Token: token}, backendless{}, dash))
	defer srv.Close()

	tests := []struct {
		name, method, path, auth string
		wantCode                 int
		wantBody                 string // substring
	}{
		{"page without token", "GET", "/", "", 200, "dashboard /"},
		{"asset without token", "GET", "/app.js", "", 200, "dashboard /app.js"},
		{"api without token", "GET", "/v1/jobs", "", 401, "missing or wrong API token"},
		{"api with wrong token", "GET", "/v1/jobs", "Bearer nope", 401, "missing or wrong API token"},
		{"metrics without token", "GET", "/metrics", "", 401, "missing or wrong API token"},
		{"unknown api path", "GET", "/v1/nope", "Bearer " + token, 404, "no such endpoint: GET /v1/nope"},
		{"unknown api path without token", "GET", "/v1/nope", "", 401, "missing or wrong API token"},
		{"post to the page", "POST", "/", "", 405, "method POST not allowed on /: use GET or HEAD"},
		{"probe", "GET", "/healthz", "", 200, `"status": "ok"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.wantCode || !strings.Contains(string(body), tc.wantBody) {
				t.Fatalf("%s %s: %d %q, want %d containing %q", tc.method, tc.path, resp.StatusCode, body, tc.wantCode, tc.wantBody)
			}
			if tc.wantCode != 200 {
				var e Error
				if err := json.Unmarshal(body, &e); err != nil || e.Error == "" {
					t.Fatalf("error body %q is not a JSON error: %v", body, err)
				}
			}
		})
	}
}

func TestHandlerWithoutDashboardAnswers404JSON(t *testing.T) {
	srv := httptest.NewServer(Handler(Config{}, backendless{}, nil))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e Error
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || resp.StatusCode != 404 || e.Error != "no such endpoint: GET /" {
		t.Fatalf("GET /: %d %+v %v, want 404 no such endpoint", resp.StatusCode, e, err)
	}
}
