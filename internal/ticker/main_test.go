package ticker

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a Cached refresh goroutine
// (or any other) running.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
