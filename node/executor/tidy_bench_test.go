package executor

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkTidyDir is what tidying an ended attempt costs its node, next
// to removing its working directory alone (remove-only, the floor), for
// an attempt whose working directory holds one file: with its tmp
// directory left (process isolation) and gone already (the sandbox
// removes it as the attempt ends). The gap is the mount table read
// before each removal (Linux). Compare tidy/remove-only ratios:
//
//	go test -run '^$' -bench TidyDir -count 5 ./node/executor/
func BenchmarkTidyDir(b *testing.B) {
	dir := b.TempDir()
	attempt := filepath.Join(dir, "a")
	make := func(withTmp bool) {
		b.StopTimer()
		if err := os.MkdirAll(filepath.Join(attempt, payloadDirName), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(attempt, payloadDirName, "out"), []byte("x"), 0o644); err != nil {
			b.Fatal(err)
		}
		if withTmp {
			if err := os.MkdirAll(filepath.Join(attempt, tmpDirName), 0o755); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
	}
	b.Run("remove-only", func(b *testing.B) {
		for b.Loop() {
			make(false)
			if err := os.RemoveAll(filepath.Join(attempt, payloadDirName)); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, c := range []struct {
		name    string
		withTmp bool
	}{{"tmp-left", true}, {"tmp-gone", false}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				make(c.withTmp)
				if err := tidyDir(attempt); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
