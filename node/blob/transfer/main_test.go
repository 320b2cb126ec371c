package transfer

import (
	"os"
	"testing"

	"github.com/gpumesh/gpumesh/mesh/leaktest"
)

// TestMain fails the run if goroutines outlive the tests (leaktest). Run
// with holderEnv set, the test binary is a holder process instead
// (holder_process_test.go).
func TestMain(m *testing.M) {
	if os.Getenv(holderEnv) != "" {
		os.Exit(holderProcess())
	}
	leaktest.VerifyMain(m)
}
