package rampart

import (
	"errors"
	"fmt"
	"strconv"
)

// ErrRejected matches, through errors.Is, every rejection by every rampart
// policy: an open breaker, an exhausted rate limit, a full bulkhead, an
// adaptive limit, a retry budget. It never matches an error returned by the
// user's own function.
var ErrRejected = errors.New("rampart: call rejected")

// ErrInvalidConfig matches, through errors.Is, every error returned by a
// policy's New for an invalid configuration.
var ErrInvalidConfig = errors.New("rampart: invalid config")

// RejectedError is a policy instance's rejection. Each instance builds its
// RejectedErrors once, at construction, and returns the same pointer on every
// rejection, so rejecting allocates and formats nothing. It matches its
// package sentinel (its Reason) and [ErrRejected] through errors.Is.
type RejectedError struct {
	policy string
	name   string
	reason error
	msg    string
}

// NewRejectedError builds the rejection error of one policy instance: policy
// is the package ("circuitbreaker"), name the instance's configured name
// (may be empty), reason the package sentinel (circuitbreaker.ErrOpen).
// Call it at construction, never per call.
func NewRejectedError(policy, name string, reason error) *RejectedError {
	// Small enough to inline: a caller that copies the error into its own
	// instance (*NewRejectedError(...)) then builds it on the stack, and
	// only the message is allocated.
	return &RejectedError{policy: policy, name: name, reason: reason, msg: rejectedMessage(policy, name, reason)}
}

// rejectedMessage is a RejectedError's message, built in one concatenation:
// the message is built once, at construction, and every temporary string
// would count against each named instance.
func rejectedMessage(policy, name string, reason error) string {
	if name != "" {
		return policy + " " + strconv.Quote(name) + ": " + reason.Error()
	}
	return policy + ": " + reason.Error()
}

// Error returns the preformatted message, e.g. `circuitbreaker "db": open`.
func (e *RejectedError) Error() string { return e.msg }

// Unwrap returns the package sentinel, so errors.Is matches it.
func (e *RejectedError) Unwrap() error { return e.reason }

// Is reports whether target is [ErrRejected].
func (e *RejectedError) Is(target error) bool { return target == ErrRejected }

// Policy returns the kind of policy that rejected ("circuitbreaker").
func (e *RejectedError) Policy() string { return e.policy }

// Name returns the configured name of the instance that rejected.
func (e *RejectedError) Name() string { return e.name }

// Reason returns the package sentinel (circuitbreaker.ErrOpen, ...).
func (e *RejectedError) Reason() error { return e.reason }

// ConfigError describes an invalid configuration value found by a policy's
// New. It matches [ErrInvalidConfig] through errors.Is.
type ConfigError struct {
	Policy string // the package, e.g. "ratelimit"
	Field  string // the Config field, e.g. "Burst"
	Reason string // what is wrong, e.g. "must be at least 1, got 0"
}

// NewConfigError returns a *ConfigError for policy's Config field, with the
// reason formatted from format and args.
func NewConfigError(policy, field, format string, args ...any) *ConfigError {
	return &ConfigError{Policy: policy, Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Error returns e.g. "ratelimit: invalid config: Burst must be at least 1, got 0".
func (e *ConfigError) Error() string {
	return e.Policy + ": invalid config: " + e.Field + " " + e.Reason
}

// Is reports whether target is [ErrInvalidConfig].
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }
