package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// SizeEnv names the variable that sets the size of the benchmark trees,
// e.g. GPUMESH_BLOB_BENCH_SIZE=4GiB (the size the figures are
// quoted at). DefaultSize keeps `go test -bench` quick.
const (
	SizeEnv     = "GPUMESH_BLOB_BENCH_SIZE"
	DefaultSize = 256 << 20
)

// Size returns the tree size the benchmarks run at: SizeEnv's value (bytes,
// or a number with KiB, MiB or GiB) or DefaultSize.
func Size() (int64, error) {
	v := os.Getenv(SizeEnv)
	if v == "" {
		return DefaultSize, nil
	}
	return ParseSize(v)
}

// ParseSize reads "4GiB", "256MiB", "64KiB" or a plain number of bytes.
func ParseSize(v string) (int64, error) {
	mult := int64(1)
	s := strings.TrimSpace(v)
	for suffix, m := range map[string]int64{"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30} {
		if rest, ok := strings.CutSuffix(s, suffix); ok {
			s, mult = rest, m
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n <= 0 || n > (1<<50)/mult {
		return 0, fmt.Errorf("bench: size %q: want bytes, or a number with KiB, MiB or GiB", v)
	}
	return n * mult, nil
}

// Human formats a byte count.
func Human(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d B", n)
}
