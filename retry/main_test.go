package retry

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind (a sleep
// that did not wake, a timer callback still running).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
