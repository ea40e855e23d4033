// Package observe is the metric scheme of rampart's exporters
// (rampartotel, rampartprom): every metric's name, kind, unit, description
// and attributes for each instance type, the reader of each from the
// instance's Stats, and the Set of named instances an exporter collects.
// It depends on the standard library and the core's policy packages only;
// an exporter translates what a collection reads into its own observations.
//
// # The scheme
//
// [Types] lists every instance type the scheme knows ([TypeOf] finds an
// instance's), each with its [Metric]s. A metric is a [Gauge] or a
// [Counter] (monotonic since the instance was created), named as
// OpenTelemetry's semantic conventions name metrics (rampart.<family>.<what>,
// a UCUM unit); [PromName] and [PromLabel] derive the Prometheus names as
// OpenTelemetry's Prometheus compatibility rules do. Every series carries
// the attribute rampart.name, the instance's name. A metric with States
// has one series per circuit breaker state (rampart.state, 1 for the
// current one); a metric with an Attr has one Metric per value of that
// attribute, in a row. Types of one family (the ratelimit types) share
// metric names, so a name is unique within a family.
// docs/observability.md's table is generated from the scheme.
//
// # Collecting
//
// A [Set] holds instances added by name ([Set.Add]) and [Source]s (such
// as a *registry.Registry) read at every collection ([Set.AddSource]).
// [Set.Collect] reads each instance's Stats once and hands the values to
// an [Emitter], then the counts of what it skipped, by reason
// ([SkipReasons], reported as rampart.skipped_instances): a Source's
// instance of an unknown type, a pipeline that counts nothing, a duplicate
// name in the family, a panic of a Source's Range or of a Stats (recovered:
// one bad instance never fails the collection of the others). A Source's
// name that is not valid UTF-8 is collected with each invalid byte
// sequence replaced by U+FFFD; Add refuses one. Collect allocates nothing
// per series: the values come in a buffer reused for every instance. The
// policies' calls never touch a Set.
package observe
