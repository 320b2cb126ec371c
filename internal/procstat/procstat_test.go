package procstat

import (
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	// A real line of /proc/PID/stat, with a name holding ") (" and spaces.
	line := "4242 (gpumesh) (node x) S 1 4242 4242 0 -1 4194560 8215 1045 0 0 1234 567 89 10 20 0 35 0 17094 1483415552 11342 18446744073709551615 1 1 0 0 0 0 0 0 2143420159 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
	cpu, children, err := parseStat(line)
	if err != nil {
		t.Fatal(err)
	}
	if cpu != 18010*time.Millisecond || children != 990*time.Millisecond {
		t.Errorf("cpu %v, children %v; want 18.01s and 990ms", cpu, children)
	}
	for _, bad := range []string{"", "4242 gpumesh S 1", "4242 (g) S 1 2 3", "4242 (g) S 1 4242 4242 0 -1 4194560 8215 1045 0 0 x 567 89 10 20", "4242 (g) S 1 4242 4242 0 -1 4194560 8215 1045 0 0 -5 567 89 10 20"} {
		if _, _, err := parseStat(bad); err == nil {
			t.Errorf("parseStat(%q) accepted", bad)
		}
	}
}

func TestParseRSS(t *testing.T) {
	rss, err := parseRSS("Name:\tgpumesh\nVmPeak:\t  900 kB\nVmRSS:\t   44312 kB\nThreads:\t12\n")
	if err != nil || rss != 44312<<10 {
		t.Errorf("rss %d, %v", rss, err)
	}
	if rss, err := parseRSS("Name:\tzombie\nState:\tZ\n"); err != nil || rss != 0 {
		t.Errorf("a zombie: %d, %v", rss, err)
	}
	for _, bad := range []string{"VmRSS:\t12 MB\n", "VmRSS:\tx kB\n", "VmRSS:\n"} {
		if _, err := parseRSS(bad); err == nil {
			t.Errorf("parseRSS(%q) accepted", bad)
		}
	}
}

// This process: some CPU spent, a resident set, and more CPU after work.
func TestReadSelf(t *testing.T) {
	if runtime.GOOS != "linux" {
		if _, err := Read(os.Getpid()); err == nil || !strings.Contains(err.Error(), "Linux only") {
			t.Fatalf("Read on %s: %v", runtime.GOOS, err)
		}
		return
	}
	before, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if before.RSS <= 0 {
		t.Errorf("RSS %d", before.RSS)
	}
	deadline := time.Now().Add(5 * time.Second)
	x := 0
	for {
		for i := range 1_000_000 {
			x += i % 7
		}
		after, err := Read(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if after.CPU > before.CPU {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no CPU time counted in 5 s of work (%d)", x)
		}
	}
	if _, err := Read(1 << 30); err == nil {
		t.Error("a process that does not exist was read")
	}
}

func FuzzParseStat(f *testing.F) {
	f.Add("4242 (gpumesh) S 1 4242 4242 0 -1 4194560 8215 1045 0 0 1234 567 89 10 20 0")
	f.Fuzz(func(t *testing.T, s string) {
		cpu, children, err := parseStat(s)
		if err == nil && (cpu < 0 || children < 0) {
			t.Errorf("negative times from %q", s)
		}
	})
}
