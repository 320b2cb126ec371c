package objstore

import (
	"path/filepath"
	"strings"
	"testing"
)

// FuzzKeyPath: whatever an object's key, the path it becomes stays under
// the download's directory.
func FuzzKeyPath(f *testing.F) {
	for _, k := range []string{"a/b.bin", "dir/", "../x", "a//b", "/abs", "a\\..\\b", "./a"} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		name, _, err := keyPath(key)
		if err != nil {
			return
		}
		if !filepath.IsLocal(filepath.FromSlash(name)) || strings.Contains(name, "\\") {
			t.Fatalf("keyPath(%q) = %q, not local", key, name)
		}
	})
}
