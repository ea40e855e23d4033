// Package budgetcheck holds the one check that package retry's New and
// package hedge's New make of a Config.Budget: that a budget of package
// retry's own types (TokenBucket, RatioBudget) was built by its
// constructor. The check reads the types' unexported fields, so package
// retry supplies it (Reason, set when retry is initialised). Package hedge
// does not import retry (no policy imports another): it calls Reason when it
// is set, and a nil Reason means that retry is not linked in, so that no
// budget of retry's types can be handed to hedge and there is nothing to
// check.
package budgetcheck

// Reason returns why b cannot be used as a budget, formatted for a
// ConfigError on the Budget field (qual prefixes the constructors' names,
// "retry." outside package retry), or "" when b is usable or is not one of
// package retry's budget types (a user's type, whose nil pointer may be a
// valid receiver). Package retry sets it in its init function; it stays
// nil in a program that does not link retry in, and a caller then has
// nothing to check. New only.
var Reason func(b any, qual string) string
