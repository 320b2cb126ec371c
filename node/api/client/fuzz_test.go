package client

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParseAddr: any address is accepted as a base URL with a host and no
// path, or refused with an error that quotes it.
func FuzzParseAddr(f *testing.F) {
	for _, s := range []string{"127.0.0.1:7070", "http://[::1]:80", "https://h:443/", "h", ":1", "http://h:1/x", "ftp://h:1", "http://u:p@h:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, addr string) {
		u, err := parseAddr(addr)
		if err != nil {
			if !strings.Contains(err.Error(), "API address") {
				t.Errorf("%q: error %q does not name the address", addr, err)
			}
			return
		}
		if u.Host == "" || u.Path != "" || u.RawQuery != "" || (u.Scheme != "http" && u.Scheme != "https") {
			t.Errorf("%q → %#v", addr, u)
		}
		if _, err := http.NewRequest(http.MethodGet, u.String()+"/v1/jobs", nil); err != nil {
			t.Errorf("%q → %s: not a request URL: %v", addr, u.String(), err)
		}
	})
}

// FuzzReadAPIError: any error body gives an APIError with the status and a
// one-line message of bounded size.
func FuzzReadAPIError(f *testing.F) {
	for _, s := range []string{`{"error":"job \"x\" not found"}`, `{"error":"bad","field":"cards"}`, `<html>502</html>`, "", "{", `{"error":""}`, "\x00\x1b[31mred\nline2"} {
		f.Add(502, []byte(s))
	}
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		if status < 100 || status > 999 {
			status = 500
		}
		resp := &http.Response{StatusCode: status, Body: io.NopCloser(bytes.NewReader(body))}
		err := readAPIError("GET", "/v1/x", resp)
		ae, ok := err.(*APIError)
		if !ok || ae.Status != status || ae.Message == "" {
			t.Fatalf("%v", err)
		}
		if strings.ContainsAny(ae.Message, "\n\r") && !strings.HasPrefix(string(body), "{") {
			t.Errorf("message is not one line: %q", ae.Message)
		}
		if !strings.HasPrefix(string(bytes.TrimSpace(body)), "{") && (len(ae.Message) > 300 || !utf8.ValidString(ae.Message) && utf8.Valid(body)) {
			t.Errorf("message %q", ae.Message)
		}
	})
}
