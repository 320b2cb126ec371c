package api

import (
	"encoding/hex"
	"strings"
	"testing"
)

// FuzzPathDigestHash: whatever the path of a content-addressed upload,
// pathDigestHash refuses it or returns the 64 lower-case hex digits that
// end it, which decode to 32 bytes.
func FuzzPathDigestHash(f *testing.F) {
	d := "sha256:" + strings.Repeat("ab", 32)
	for _, p := range []string{"/v1/payloads/" + d, "/v1/payloads/" + d + "/chunks/" + d, "/v1/payloads/sha256:AB", "/", "", "sha256:", "/x/sha256:" + strings.Repeat("g", 64)} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, path string) {
		h, err := pathDigestHash(path)
		if err != nil {
			return
		}
		b, derr := hex.DecodeString(h)
		if derr != nil || len(b) != 32 || strings.ToLower(h) != h || !strings.HasSuffix(path, "sha256:"+h) {
			t.Fatalf("pathDigestHash(%q) = %q", path, h)
		}
	})
}
