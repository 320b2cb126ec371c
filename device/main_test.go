package device

import (
	"testing"

	"go.uber.org/goleak"
)

// The Manager and the watchers start goroutines; none may outlive a test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
