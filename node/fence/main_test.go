package fence

import (
	"os"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/mesh/leaktest"
)

// TestMain runs the tests, failing the run if goroutines outlive them
// (leaktest). The tests start this same binary as a keeper (argv
// {binary, Subcommand}, as the gpumesh binary does) and as a stand-in node
// (helperMain).
func TestMain(m *testing.M) {
	if len(os.Args) == 2 && os.Args[1] == Subcommand {
		os.Exit(Main(os.Stdin, os.Stdout))
	}
	if len(os.Args) > 1 {
		if code, ok := helperMain(os.Args[1], os.Args[2:]); ok {
			os.Exit(code)
		}
	}
	// A race-enabled binary sleeps a second on exit by default; the keepers
	// and stand-in nodes these tests start need not.
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	leaktest.VerifyMain(m)
}
