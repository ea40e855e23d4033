package pipeline

import (
	"errors"
	"time"

	"github.com/rampart-go/rampart"
)

// durationOf converts a nanosecond count to a Duration, 0 for negatives.
func durationOf(ns int64) time.Duration {
	if ns <= 0 {
		return 0
	}
	return time.Duration(ns)
}

// isRejection reports whether err is a rampart rejection. The policies'
// rejection errors are *rampart.RejectedError, so the common case is one
// type assertion; errors.Is handles anything else.
func isRejection(err error) bool {
	if _, ok := err.(*rampart.RejectedError); ok {
		return true
	}
	return errors.Is(err, rampart.ErrRejected)
}
