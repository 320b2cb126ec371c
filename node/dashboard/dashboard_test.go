package dashboard

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, method, path string) *http.Response {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec.Result()
}

func TestHandlerServesTheFiles(t *testing.T) {
	h := Handler()
	for _, tc := range []struct {
		path, contentType, contains string
	}{
		{"/", "text/html; charset=utf-8", `<script src="app.js"></script>`},
		{"/app.js", "text/javascript; charset=utf-8", "/v1/events"},
		{"/style.css", "text/css; charset=utf-8", ".cap-row"},
		{"/favicon.svg", "image/svg+xml", "<svg"},
	} {
		resp := get(t, h, "GET", tc.path)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != tc.contentType || !strings.Contains(string(body), tc.contains) {
			t.Errorf("GET %s: %d %q, body has %q: %v", tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), tc.contains, strings.Contains(string(body), tc.contains))
		}
		csp := resp.Header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("GET %s: CSP %q lacks %q", tc.path, csp, want)
			}
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: no nosniff", tc.path)
		}
	}
	if resp := get(t, h, "HEAD", "/app.js"); resp.StatusCode != 200 {
		t.Errorf("HEAD /app.js: %d", resp.StatusCode)
	}
	if resp := get(t, h, "GET", "/nope.js"); resp.StatusCode != 404 {
		t.Errorf("GET /nope.js: %d, want 404", resp.StatusCode)
	}
	if resp := get(t, h, "POST", "/"); resp.StatusCode != 405 || resp.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /: %d Allow %q, want 405 GET, HEAD", resp.StatusCode, resp.Header.Get("Allow"))
	}
	if resp := get(t, h, "GET", "/../dashboard.go"); resp.StatusCode == 200 {
		t.Errorf("GET /../dashboard.go served a file outside static/")
	}
}

// TestNoExternalRequests: no file the page loads names another origin, and
// the page loads only files that exist.
func TestNoExternalRequests(t *testing.T) {
	files, err := fs.Sub(static, "static")
	if err != nil {
		t.Fatal(err)
	}
	external := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}|@import|url\(\s*['"]?(https?:|//)|\bimport\s*\(`)
	namespace := "http://www.w3.org/2000/svg" // an XML namespace, never fetched
	n := 0
	err = fs.WalkDir(files, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		data, err := fs.ReadFile(files, path)
		if err != nil {
			return err
		}
		text := strings.ReplaceAll(string(data), namespace, "")
		for i, line := range strings.Split(text, "\n") {
			if m := external.FindString(line); m != "" {
				t.Errorf("%s:%d names another origin (%q): %s", path, i+1, m, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil || n < 4 {
		t.Fatalf("walked %d files: %v", n, err)
	}
	index, _ := fs.ReadFile(files, "index.html")
	ref := regexp.MustCompile(`(?:src|href)="([^"#][^"]*)"`)
	for _, m := range ref.FindAllStringSubmatch(string(index), -1) {
		if _, err := fs.Stat(files, m[1]); err != nil {
			t.Errorf("index.html loads %q, which is not embedded: %v", m[1], err)
		}
	}
}

// TestPageInsertsNoHTML: the script builds the page from text nodes only, so
// a peer's model name or a job's log line cannot inject markup.
func TestPageInsertsNoHTML(t *testing.T) {
	js, err := static.ReadFile("static/app.js")
	if err != nil {
		t.Fatal(err)
	}
	for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"} {
		if strings.Contains(string(js), sink) {
			t.Errorf("app.js uses %s", sink)
		}
	}
}
