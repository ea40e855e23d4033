// Package rampartconfig configures rampart's policies from a YAML or JSON
// document and keeps them in step with it while the process runs.
//
// A document has defaults per policy kind, named instances per kind (each
// inherits its kind's defaults field by field; what it sets overrides),
// and pipelines, each naming its policies inline or by reference to a
// named instance:
//
//	defaults:
//	  breaker: {failureRateThreshold: 50, openDuration: 5s}
//	breakers:
//	  payments: {groups: [upstream], minimumCalls: 20}
//	pipelines:
//	  db:
//	    groups: [storage]
//	    breaker: {failureRateThreshold: 25}   # inline: registered as db.breaker
//	    retry: {maxAttempts: 3, baseDelay: 50ms}
//	    timeout: {duration: 200ms}
//	  checkout:
//	    breaker: {ref: payments}
//
// Field names are the policy Config's in lowerCamelCase; durations are Go
// duration strings ("200ms"), rates numbers, enumerations their names
// ("count", "full-jitter", "soft"). docs/config.md lists every field of
// every kind with its default and whether a reload may change it. Unknown
// fields are errors.
//
// # Loading
//
// [Load] and [LoadFile] parse a document strictly and validate every
// instance with its policy's own validation (its New), and report every
// invalid value, each as a [*FieldError] with its path:
//
//	pipelines.db.breaker.failureRateThreshold: must be a percentage in (0, 100] (0 = default 50), got 150
//
// A policy's New reports the first invalid field of a Config; the loader
// clears it and asks again, so that one instance's independent errors are
// all reported too.
//
// # Building and reloading
//
// [Build] creates the instances in a registry (package registry): named
// instances under their names, pipelines under theirs, a pipeline's
// inline policies under "<pipeline>.<slot>" (db.breaker), each in its
// groups, so that the registry's group operations reach them.
// [Live.Apply] makes the registry match another document, all or nothing:
// it validates every change first, each with the policy's own Update on a
// throwaway twin of the instance, then applies them in place (the same
// instance pointers, their state kept: an open breaker stays open across
// a threshold change), and undoes what it applied should a step fail
// anyway. A change to a field fixed at construction is an error naming it,
// unless the instance is marked replace: true, which builds a new instance
// in its place (and rebuilds the pipelines that use it); callers holding
// the old one keep it. Instances absent from the new document are removed
// from the registry, so that group operations, metrics and status pages
// follow the document; calls in flight hold their own pointers, so
// removal is safe, and the removed Hedgers and Timeouts are closed by
// [Live.Close] (the Live keeps no other removed instance). Keeping them
// instead would leave instances that nothing configures in the group
// operations; resilience4j's registries remove an entry the same way
// (Registry.remove, an EntryRemovedEvent).
//
// A change of an instance's groups alone moves it between groups in
// place (registry.Registry.SetGroups): it is not updated, so a
// registry.Scale of it stays. An Update of a scaled bulkhead or rate
// limiter sets the document's value and takes it as the baseline a later
// registry Restore puts back, under the registry's lock, so that no Scale
// lands between the two (registry.Registry.UpdateScaled). An Apply that
// fails puts back every value and baseline as they were, scaled or not,
// and removes an instance only at its last step, after which nothing
// fails. An overload shedder (shedders, a
// pipeline's shed) has no Update: a reload that changes it needs
// replace: true. An inline policy without groups of its own is in its
// pipeline's groups (none when the pipeline has none).
//
// Apply takes a deep copy of the document it is given, and
// [Live.Document] returns another copy: a document may be changed
// through its pointers (its groups included) and applied again, and the
// change is seen.
//
// A listener or other func that [Options.Configure] sets is compared by
// identity, as the policies' Update compares it: set the same func value
// on every call (one made once, outside Configure). A new closure on
// every call is a changed func, which a policy whose Update fixes it (a
// bulkhead's OnRejected) refuses, in the checks before anything changes.
//
// The document says nothing of code: the clock ([Options.Ticker]) and
// the listeners, classifiers and budgets ([Options.Configure]).
//
// # Watching a file
//
// [Watch] reloads a file after every change (it watches the directory,
// since editors replace a file by renaming another onto it, and debounces
// the events), keeps the configuration in force when the new document is
// invalid, and reports each attempt through its callback: the hash of the
// bytes and the version applied, or why not. A file that reads empty (a
// write caught between its truncate and its write) is never applied as a
// document without instances: it is reported as [ErrEmptyDocument] and
// read again after the debounce; an explicit null ("null", "~") is a
// document without instances, applied as [Load] reads it. The debounce
// waits at most 10 periods after the first pending event, a replaced
// directory is watched again once it exists, and a directory that is a
// symbolic link is followed to its new target when the link is swapped.
// Write the file atomically (a temporary file renamed onto the path): a
// file rewritten in place in several writes may be read half written.
package rampartconfig
