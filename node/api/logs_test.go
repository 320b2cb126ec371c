package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// logBackend answers a log request with the request it got.
type logBackend struct{ backendless }

func (logBackend) Logs(_ context.Context, req LogRequest, w io.Writer, flush func()) error {
	fmt.Fprintf(w, "job=%s share=%d epoch=%d stream=%s", req.Job, req.Share, req.Epoch, req.Stream)
	flush()
	return nil
}

func TestLogsEpochParameter(t *testing.T) {
	srv := httptest.NewServer(Handler(Config{}, logBackend{}, nil))
	defer srv.Close()
	get := func(query string) (int, string) {
		resp, err := http.Get(srv.URL + "/v1/jobs/j1/logs" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("?share=1&epoch=7"); code != 200 || body != "job=j1 share=1 epoch=7 stream=" {
		t.Errorf("epoch 7: %d %q", code, body)
	}
	if code, body := get(""); code != 200 || body != "job=j1 share=0 epoch=0 stream=" {
		t.Errorf("no epoch: %d %q", code, body)
	}
	for _, bad := range []string{"0", "-1", "last", "1.5"} {
		code, body := get("?epoch=" + bad)
		var e Error
		if code != 400 || json.Unmarshal([]byte(body), &e) != nil || e.Field != "epoch" || !strings.Contains(e.Error, "want a number ≥ 1") {
			t.Errorf("epoch=%s: %d %q, want a 400 on epoch", bad, code, body)
		}
	}
}
