package rampartconfig

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite docs/config.md from the schema")

const docsPath = "../docs/config.md"

func TestSchemaDocsCoverEveryField(t *testing.T) {
	want := map[string]bool{}
	for _, k := range kinds {
		for _, f := range specFields(k.spec, "") {
			want[k.key+"."+f] = true
			if _, ok := schemaDocs[k.key+"."+f]; !ok {
				t.Errorf("%s.%s has no schemaDocs entry", k.key, f)
			}
		}
	}
	for key := range schemaDocs {
		if !want[key] {
			t.Errorf("schemaDocs has %s, which is no field", key)
		}
	}
}

// TestSchemaDocsSayWhichFieldsAReloadMayChange applies, for every field
// with a sample, the base instance and then the base with the field
// changed: a field documented updatable must be applied, a fixed one
// refused with an error naming it.
func TestSchemaDocsSayWhichFieldsAReloadMayChange(t *testing.T) {
	for _, k := range kinds {
		for _, f := range specFields(k.spec, "") {
			key := k.key + "." + f
			d := schemaDocs[key]
			if d.sample == "" {
				continue
			}
			t.Run(key, func(t *testing.T) {
				base := k.section + ": {x: " + schemaBase[k.key] + "}"
				l := mustBuild(t, mustLoad(t, base), Options{})
				top, _, _ := strings.Cut(f, ".")
				var m map[string]any
				if err := yaml.Unmarshal([]byte(schemaBase[k.key]), &m); err != nil {
					t.Fatal(err)
				}
				if m == nil {
					m = map[string]any{}
				}
				if whole, ok := strings.CutPrefix(d.sample, "="); ok {
					m = nil
					if err := yaml.Unmarshal([]byte(whole), &m); err != nil {
						t.Fatal(err)
					}
				} else {
					var v any
					if err := yaml.Unmarshal([]byte(d.sample), &v); err != nil {
						t.Fatal(err)
					}
					m[top] = v
				}
				changed, err := yaml.Marshal(map[string]any{k.section: map[string]any{"x": m}})
				if err != nil {
					t.Fatal(err)
				}
				doc, err := Load(changed, YAML)
				if err != nil {
					t.Fatalf("the sample is invalid: %v\n%s", err, changed)
				}
				err = l.Apply(doc)
				switch {
				case d.fixed == "" && err != nil:
					t.Errorf("documented updatable, refused: %v", err)
				case d.fixed != "" && err == nil:
					t.Errorf("documented fixed (%s), applied", d.fixed)
				case d.fixed != "" && !strings.Contains(err.Error(), k.section+".x."+top):
					t.Errorf("the refusal does not name %s.x.%s: %v", k.section, top, err)
				}
			})
		}
	}
}

func TestDocsConfigIsGeneratedFromTheSchema(t *testing.T) {
	got := renderDocs()
	if *update {
		if err := os.WriteFile(docsPath, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	have, err := os.ReadFile(docsPath)
	if err != nil {
		t.Fatal(err)
	}
	if string(have) != got {
		t.Errorf("%s is not what the schema renders: run go test -run TestDocsConfigIsGeneratedFromTheSchema -update", docsPath)
	}
	// The reference's example is a valid document.
	ex := between(got, "```yaml\n", "```\n")
	if _, err := Load([]byte(ex), YAML); err != nil {
		t.Errorf("the reference's example: %v", err)
	}
}

// between returns the text of s between the first start and the next end.
func between(s, start, end string) string {
	_, s, _ = strings.Cut(s, start)
	s, _, _ = strings.Cut(s, end)
	return s
}

// configType names each kind's Config in the reference.
var configType = map[string]string{
	"breaker": "circuitbreaker.Config", "rateLimiter": "ratelimit.Config", "shardedRateLimiter": "ratelimit.ShardedConfig",
	"bulkhead": "bulkhead.Config", "adaptive": "adaptive.Config", "retry": "retry.Config", "timeout": "timeout.Config", "hedge": "hedge.Config",
	"shed": "shed.Config",
}

// renderDocs renders docs/config.md.
func renderDocs() string {
	var b strings.Builder
	b.WriteString(docsIntro)
	for _, k := range kinds {
		fmt.Fprintf(&b, "\n## %s\n\n", k.key)
		fmt.Fprintf(&b, "Named instances under `%s`, defaults under `defaults.%s`, inline in a pipeline as `%s`. Sets a `%s`.\n\n", k.section, k.key, k.key, configType[k.key])
		b.WriteString("| field | default | reload | meaning |\n|---|---|---|---|\n")
		fields := specFields(k.spec, "")
		for _, f := range fields {
			d := schemaDocs[k.key+"."+f]
			reload := "updatable"
			switch d.fixed {
			case "":
			case "always":
				reload = "fixed"
			default:
				reload = "fixed " + d.fixed
			}
			def := d.def
			if def == "" {
				def = "-"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", f, def, reload, d.about)
		}
	}
	b.WriteString(docsPipelines)
	return b.String()
}

const docsIntro = "# Configuration documents (rampartconfig)\n\n" +
	"Module `github.com/rampart-go/rampart/rampartconfig` builds rampart's policies from a YAML or JSON document\n" +
	"into a registry and keeps them in step with it while the process runs. This reference is generated from the\n" +
	"module's schema by its tests (`go test -run TestDocsConfigIsGeneratedFromTheSchema -update` rewrites it), and\n" +
	"the tests check every reload column against the policies' own `Update`.\n\n" +
	"```yaml\n" +
	"defaults:\n" +
	"  breaker: {failureRateThreshold: 50, openDuration: 5s}\n" +
	"  retry: {maxAttempts: 3, baseDelay: 50ms}\n" +
	"breakers:\n" +
	"  payments: {groups: [upstream], minimumCalls: 20}\n" +
	"rateLimiters:\n" +
	"  edge: {rate: 1000, burst: 100, groups: [edge]}\n" +
	"pipelines:\n" +
	"  db:\n" +
	"    groups: [storage]\n" +
	"    idempotent: true\n" +
	"    breaker: {failureRateThreshold: 25}   # inline: registered as db.breaker\n" +
	"    retry: {}                             # inline, the defaults' fields\n" +
	"    timeout: {duration: 200ms}\n" +
	"  checkout:\n" +
	"    breaker: {ref: payments}              # the named instance\n" +
	"    rateLimiter: {ref: edge}\n" +
	"```\n\n" +
	"The same document in JSON has the same fields. Rules:\n\n" +
	"- Field names are the policy Config's in lowerCamelCase. Unknown fields are errors.\n" +
	"- Durations are Go duration strings (`\"200ms\"`, `\"1m30s\"`); rates and percentages are numbers;\n" +
	"  enumerations are their names.\n" +
	"- An absent field is inherited from `defaults.<kind>`; absent there too, it is the policy's default (the\n" +
	"  column below). `queue`, `algorithm` and `partitions` are inherited whole.\n" +
	"- Every instance may carry `groups` (its registry groups: absent, a named instance takes the defaults',\n" +
	"  an inline policy its pipeline's, none when the pipeline has none) and `replace: true` (see Reloading).\n" +
	"- Registry names: a named instance is registered under its name, a pipeline under its name, a pipeline's\n" +
	"  inline policy under `<pipeline>.<slot>` (`db.breaker`). Names are unique across kinds.\n" +
	"- Code-level fields (Ticker, listeners, Classify, Budget, ShouldRetry, Fatal, a timeout's Watchdog) are not\n" +
	"  in the document: `Options.Ticker` and `Options.Configure` set them.\n\n" +
	"Loading reports every invalid value with its path, in the policy's own words:\n\n" +
	"```\n" +
	"pipelines.db.breaker.failureRateThreshold: must be a percentage in (0, 100] (0 = default 50), got 150\n" +
	"breakers.payments.openJitter: must be in [0, 1), got 2\n" +
	"```\n\n" +
	"## Reloading\n\n" +
	"`Live.Apply` (and the file `Watcher`) applies a new document all or nothing: every change is first checked\n" +
	"with the policy's own `Update` on a throwaway twin of the instance; then the changed instances are updated in\n" +
	"place (the same pointers, their state kept), new ones built, and the instances absent from the document\n" +
	"removed from the registry (a removed Hedger or Timeout is closed by `Live.Close`). A change to a field marked\n" +
	"fixed below is an error naming its path, unless the instance has `replace: true`: then a new instance replaces\n" +
	"it in the registry and in the pipelines that use it (callers holding the old one keep it). An invalid document\n" +
	"changes nothing. `Apply` takes a deep copy of the document it is given, and `Live.Document` returns another:\n" +
	"either may be changed (its groups too) and applied again. A func that `Options.Configure` sets (a listener) is\n" +
	"compared by identity, as the policies' `Update` does: set the same func value on every call (made once,\n" +
	"outside `Configure`); a new closure on every call is a changed func, which a policy whose `Update` fixes it (a\n" +
	"bulkhead's `OnRejected`) refuses, in the checks before anything changes.\n\n" +
	"Reloads and `registry.Scale`: a change of an instance's `groups` (or `replace`) only moves it between groups in\n" +
	"place (`registry.SetGroups`): its values, and a Scale of it, are kept. A change of any other field of a scaled\n" +
	"bulkhead or rate limiter is applied as written (the document's `max` or rate, not scaled), and becomes the\n" +
	"baseline a later `registry.Restore` puts back, both under the registry's lock so that no Scale lands between\n" +
	"them (`registry.UpdateScaled`); a later Scale scales it. An `Apply` that fails puts every value and baseline\n" +
	"back as it was, scaled or not, and removes instances only at its last step, after which nothing fails.\n\n" +
	"`Watch(ctx, path, live, onEvent)` reloads the file after each change: it watches the file's directory (editors\n" +
	"replace a file by renaming another onto it), waits `Options.Debounce` (100 ms) after the last event, skips bytes\n" +
	"it has already read, and reports every attempt to `onEvent` with the SHA-256 of the bytes and the version in\n" +
	"force, or the error that kept the old configuration. `Close` stops it. A file that reads empty (no bytes, or\n" +
	"only blanks and comments: most often a write caught between its truncate and its write) is never applied: it\n" +
	"is reported as `ErrEmptyDocument`, the configuration in force is kept and the file read again after the\n" +
	"debounce (to remove every instance, write `{}` or an explicit `null`, YAML's `null` or `~`, which `Load`\n" +
	"also reads as a document without instances). The wait is at most 10 debounce periods after the first\n" +
	"change not yet read, however busy the directory. When the directory itself is removed or renamed (a deploy\n" +
	"renaming a new directory into place), the watch is set again on the path once it exists. When the directory\n" +
	"is a symbolic link swapped to a new release (`ln -sfn releases/43 current.tmp && mv -T current.tmp current`),\n" +
	"its parent is watched too and the watch follows the new target.\n\n" +
	"Write the file atomically: a temporary file in the same directory renamed onto the path (editors and\n" +
	"ConfigMaps do). A file rewritten in place in several writes can be read between two of them, half written:\n" +
	"that part is applied if it happens to be a valid document, reported as an error otherwise.\n"

const docsPipelines = "\n## pipeline\n\n" +
	"Under `pipelines`, by name. Sets a `pipeline.Config`. Each policy slot is `{ref: <name>}` (an instance of the\n" +
	"slot's section) or an inline instance of the slot's kind (the tables above). A pipeline has no Update: a\n" +
	"change to any of its own fields or to which instances it uses needs `replace: true`; a pipeline whose policy is\n" +
	"replaced is rebuilt.\n\n" +
	"| field | default | reload | meaning |\n|---|---|---|---|\n" +
	"| `idempotent` | false | fixed | the calls may be hedged (pipeline.Config.Idempotent) |\n" +
	"| `countStats` | false | fixed | count outcomes per kind in Stats |\n" +
	"| `retry` | none | fixed (its fields: see retry) | the retry policy |\n" +
	"| `breaker` | none | fixed (its fields: see breaker) | the circuit breaker |\n" +
	"| `rateLimiter` | none | fixed (its fields: see rateLimiter) | the rate limiter (a ratelimit.Limiter) |\n" +
	"| `bulkhead` | none | fixed (its fields: see bulkhead) | the bulkhead |\n" +
	"| `adaptive` | none | fixed (its fields: see adaptive) | the adaptive concurrency limiter |\n" +
	"| `timeout` | none | fixed (its fields: see timeout) | the timeout |\n" +
	"| `hedge` | none | fixed (its fields: see hedge) | the hedger |\n" +
	"| `shed` | none | fixed (its fields: see shed) | the overload shedder, the last admission (`ShedPriority` by `Options.Configure`) |\n" +
	"| `groups` | none | updatable | registry groups |\n" +
	"| `replace` | false | updatable | rebuild the pipeline on a change |\n"
