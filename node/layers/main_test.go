package layers_test

import (
	"testing"

	"github.com/gpumesh/gpumesh/mesh/leaktest"
)

// TestMain fails the run if goroutines outlive the tests (leaktest).
func TestMain(m *testing.M) { leaktest.VerifyMain(m) }
