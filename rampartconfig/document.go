package rampartconfig

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/pipeline"
)

// Format is a document's syntax.
type Format uint8

const (
	// YAML is a YAML document (one per file).
	YAML Format = iota
	// JSON is a JSON document, with the same schema as YAML's.
	JSON
)

// String returns "yaml" or "json".
func (f Format) String() string {
	if f == JSON {
		return "json"
	}
	return "yaml"
}

// FormatOf returns the format of a file by its extension: JSON for
// ".json", YAML otherwise.
func FormatOf(path string) Format {
	if strings.EqualFold(filepath.Ext(path), ".json") {
		return JSON
	}
	return YAML
}

// Document is a configuration: the defaults per policy kind, the named
// instances of each kind and the pipelines. [Load] returns one validated;
// one built in code is validated by [Build] and [Live.Apply].
type Document struct {
	// Defaults holds the fields every instance of a kind inherits.
	Defaults Defaults `json:"defaults,omitzero" yaml:"defaults,omitempty"`

	// Breakers are the named circuit breakers.
	Breakers map[string]*BreakerSpec `json:"breakers,omitempty" yaml:"breakers,omitempty"`
	// RateLimiters are the named rate limiters (ratelimit.Limiter).
	RateLimiters map[string]*RateLimiterSpec `json:"rateLimiters,omitempty" yaml:"rateLimiters,omitempty"`
	// ShardedRateLimiters are the named sharded rate limiters.
	ShardedRateLimiters map[string]*ShardedRateLimiterSpec `json:"shardedRateLimiters,omitempty" yaml:"shardedRateLimiters,omitempty"`
	// Bulkheads are the named bulkheads.
	Bulkheads map[string]*BulkheadSpec `json:"bulkheads,omitempty" yaml:"bulkheads,omitempty"`
	// AdaptiveLimiters are the named adaptive concurrency limiters.
	AdaptiveLimiters map[string]*AdaptiveSpec `json:"adaptiveLimiters,omitempty" yaml:"adaptiveLimiters,omitempty"`
	// Retries are the named retry policies.
	Retries map[string]*RetrySpec `json:"retries,omitempty" yaml:"retries,omitempty"`
	// Timeouts are the named timeouts.
	Timeouts map[string]*TimeoutSpec `json:"timeouts,omitempty" yaml:"timeouts,omitempty"`
	// Hedgers are the named hedgers.
	Hedgers map[string]*HedgeSpec `json:"hedgers,omitempty" yaml:"hedgers,omitempty"`
	// Shedders are the named overload shedders (shed.Shedder).
	Shedders map[string]*ShedSpec `json:"shedders,omitempty" yaml:"shedders,omitempty"`

	// Pipelines are the pipelines by name.
	Pipelines map[string]*PipelineSpec `json:"pipelines,omitempty" yaml:"pipelines,omitempty"`

	hash string
}

// Hash returns the SHA-256 (hex) of the bytes [Load] read, "" for a
// document built in code: the version a [Watcher] reports.
func (d *Document) Hash() string { return d.hash }

// FieldError is one invalid value of a document, at its path
// (pipelines.db.breaker.failureRateThreshold). Err is the policy's
// *rampart.ConfigError when the policy's own validation found it, so that
// errors.Is(err, rampart.ErrInvalidConfig) holds.
type FieldError struct {
	// Path is the value's place in the document, dot-separated.
	Path string
	// Err is what is wrong with it.
	Err error

	field string // the Config field, for a policy's own error
}

// Error returns "path: reason".
func (e *FieldError) Error() string {
	if ce, ok := errors.AsType[*rampart.ConfigError](e.Err); ok {
		return e.Path + ": " + ce.Reason
	}
	return e.Path + ": " + e.Err.Error()
}

// Unwrap returns Err.
func (e *FieldError) Unwrap() error { return e.Err }

// Is reports whether target is rampart.ErrInvalidConfig: every FieldError
// is an invalid configuration.
func (e *FieldError) Is(target error) bool { return target == rampart.ErrInvalidConfig }

// Load parses data in format strictly (an unknown field is an error) and
// validates every instance with its policy's own validation. The error
// joins a *FieldError for every invalid value found (all of them, each with
// its path), or is the syntax error.
func Load(data []byte, format Format) (*Document, error) {
	doc := &Document{}
	if err := decode(data, format, doc); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	doc.hash = hex.EncodeToString(sum[:])
	if _, err := doc.plan(nil); err != nil {
		return nil, err
	}
	return doc, nil
}

// LoadFile reads and loads the file at path, in the format of its
// extension ([FormatOf]).
func LoadFile(path string) (*Document, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Load(data, FormatOf(path))
}

// decode parses data strictly into doc. Unknown fields are reported
// first, every one with its path; the strict decoders stop at the first
// (JSON) or report none by path (YAML).
func decode(data []byte, format Format, doc *Document) error {
	var tree any
	var err error
	switch format {
	case JSON:
		err = json.Unmarshal(data, &tree)
	case YAML:
		err = yaml.Unmarshal(data, &tree)
	}
	if err == nil {
		var errs []error
		unknownFields(tree, reflect.TypeFor[Document](), "", &errs)
		if len(errs) > 0 {
			return errors.Join(errs...)
		}
	}
	switch format {
	case JSON:
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(doc); err != nil {
			return fmt.Errorf("rampartconfig: json: %w", err)
		}
		if _, err := dec.Token(); err != io.EOF {
			return errors.New("rampartconfig: json: data after the document")
		}
	case YAML:
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(doc); err != nil {
			if err == io.EOF { // an empty document
				return nil
			}
			return fmt.Errorf("rampartconfig: yaml: %w", err)
		}
		var more yaml.Node
		if err := dec.Decode(&more); err != io.EOF {
			return errors.New("rampartconfig: yaml: more than one document")
		}
	default:
		return fmt.Errorf("rampartconfig: unknown format %d", format)
	}
	return nil
}

// planned is one instance of a document, resolved: its spec merged with
// the defaults and turned into its policy's Config.
type planned struct {
	kind *kind // nil for a pipeline
	name string
	path string // its place in the document: breakers.db, pipelines.db.breaker
	// spec is the merged spec (a *XSpec; *PipelineSpec for a pipeline),
	// compared between documents to find what changed.
	spec    any
	groups  []string
	replace bool
	// cfg is a pointer to the policy Config (nil for a pipeline).
	cfg any
	// slots are a pipeline's policies: the names of their instances by
	// slot key.
	slots map[string]string
}

// plan resolves the document into its instances, named ones first (in
// kind order, by name), then each pipeline's inline policies and the
// pipeline. It validates every instance by building it (and closing it),
// and returns every error found.
func (d *Document) plan(o *Options) ([]*planned, error) {
	var errs []error
	var out []*planned
	taken := map[string]string{} // registry name → the path that claimed it
	claim := func(name, path string) bool {
		if prev, ok := taken[name]; ok {
			errs = append(errs, &FieldError{Path: path, Err: fmt.Errorf("the registry name %q is also %s", name, prev)})
			return false
		}
		taken[name] = path
		return true
	}
	dv := reflect.ValueOf(&d.Defaults).Elem()
	sections := reflect.ValueOf(d).Elem()
	defaults := map[string]reflect.Value{}
	bad := map[string]map[string]bool{} // by kind key: the Config fields invalid in the defaults
	for _, k := range kinds {
		def := dv.FieldByName(fieldOfKey(dv.Type(), k.key))
		defaults[k.key] = def
		bad[k.key] = map[string]bool{}
		if !def.IsNil() {
			// The defaults are validated as an instance of their own, so that
			// an invalid default is reported once, at its own path.
			p := &planned{kind: k, path: "defaults." + k.key}
			es := p.resolve(def, reflect.Zero(def.Type()), nil, nil, o)
			for _, e := range es {
				if fe, ok := e.(*FieldError); ok && fe.field != "" {
					bad[k.key][fe.field] = true
				}
			}
			errs = append(errs, es...)
		}
	}
	for _, k := range kinds {
		m := sections.FieldByName(fieldOfSection(sections.Type(), k.section))
		for _, name := range sortedKeys(m) {
			path := k.section + "." + name
			if name == "" {
				errs = append(errs, &FieldError{Path: path, Err: errors.New("an instance needs a name")})
				continue
			}
			if !claim(name, path) {
				continue
			}
			p := &planned{kind: k, name: name, path: path}
			if es := p.resolve(m.MapIndex(reflect.ValueOf(name)), defaults[k.key], nil, bad[k.key], o); len(es) > 0 {
				errs = append(errs, es...)
				continue
			}
			out = append(out, p)
		}
	}
	for _, name := range slices.Sorted(mapsKeys(d.Pipelines)) {
		path := "pipelines." + name
		spec := d.Pipelines[name]
		if spec == nil {
			spec = &PipelineSpec{}
		}
		if name == "" {
			errs = append(errs, &FieldError{Path: path, Err: errors.New("a pipeline needs a name")})
			continue
		}
		pp := &planned{name: name, path: path, groups: spec.Groups, replace: spec.Replace, slots: map[string]string{}}
		ok := claim(name, path)
		sv := reflect.ValueOf(spec).Elem()
		for i := range sv.NumField() {
			f := sv.Type().Field(i)
			k := kindByKey(jsonName(f))
			if k == nil || sv.Field(i).IsNil() {
				continue
			}
			slot := sv.Field(i).Elem()
			spath := path + "." + k.key
			if ref := slot.Field(0).Field(0).String(); ref != "" {
				if !reflect.DeepEqual(slot.Field(1).Interface(), reflect.Zero(slot.Field(1).Type()).Interface()) {
					errs = append(errs, &FieldError{Path: spath, Err: errors.New("a slot with a ref has no other field")})
					ok = false
					continue
				}
				m := sections.FieldByName(fieldOfSection(sections.Type(), k.section))
				if !m.MapIndex(reflect.ValueOf(ref)).IsValid() {
					errs = append(errs, &FieldError{Path: spath + ".ref", Err: fmt.Errorf("no %s named %q", k.section, ref)})
					ok = false
					continue
				}
				pp.slots[k.key] = ref
				continue
			}
			iname := name + "." + k.key
			if !claim(iname, spath) {
				ok = false
				continue
			}
			p := &planned{kind: k, name: iname, path: spath}
			if es := p.resolve(slot.Field(1).Addr(), defaults[k.key], &spec.Groups, bad[k.key], o); len(es) > 0 {
				errs = append(errs, es...)
				ok = false
				continue
			}
			out = append(out, p)
			pp.slots[k.key] = iname
		}
		if !ok {
			continue
		}
		pp.spec = pipelineKey(spec, pp.slots)
		if err := pp.validatePipeline(out, o); err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, pp)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// pipelineSpecKey is what identifies a pipeline's construction: two
// documents whose pipelines have equal keys build equal pipelines (given
// equal policies).
type pipelineSpecKey struct {
	Idempotent, CountStats bool
	Slots                  string
}

// pipelineKey returns a pipeline's key.
func pipelineKey(s *PipelineSpec, slots map[string]string) pipelineSpecKey {
	var b strings.Builder
	for _, k := range kinds {
		if n, ok := slots[k.key]; ok {
			b.WriteString(k.key + "=" + n + ";")
		}
	}
	return pipelineSpecKey{Idempotent: s.Idempotent != nil && *s.Idempotent, CountStats: s.CountStats != nil && *s.CountStats, Slots: b.String()}
}

// resolve merges spec (a *XSpec value) with def, turns it into p's Config
// and validates it with the kind's New, collecting every invalid field:
// New reports the first one, which is then cleared from a copy of the spec
// and New asked again. A field inherited from defaults that are invalid
// there (bad) was reported at the defaults and is not reported again.
// pipelineGroups is the groups of an inline policy's pipeline (nil for a
// named instance or the defaults).
func (p *planned) resolve(spec, def reflect.Value, pipelineGroups *[]string, bad map[string]bool, o *Options) []error {
	k := p.kind
	if spec.Kind() == reflect.Pointer && spec.IsNil() {
		spec = reflect.New(k.spec)
	}
	merged := merge(spec, def)
	p.spec = merged.Interface()
	meta := merged.Elem().FieldByName("Meta").Interface().(Meta)
	p.groups, p.replace = meta.Groups, meta.Replace
	if pipelineGroups != nil && spec.Elem().FieldByName("Meta").FieldByName("Groups").IsNil() {
		// An inline policy without groups of its own is in its
		// pipeline's, none when the pipeline has none: not the defaults'.
		p.groups = *pipelineGroups
	}
	var errs []error
	seen := map[string]bool{}
	work := merge(merged, reflect.Zero(merged.Type())) // a copy that validation may clear
	for i := range 64 {                                // more than any kind's fields
		cfg := reflect.New(k.config)
		// A value no Config field takes (an unknown enum name, an invalid
		// algorithm) leaves the field at its default, so that New checks
		// the others: each is reported once.
		if es := fill(k, cfg.Elem(), work.Elem(), p.path); i == 0 {
			errs = append(errs, es...)
		}
		k.setName(cfg.Interface(), p.name)
		o.apply(p.name, cfg.Interface())
		inst, err := k.build(cfg.Interface())
		if err == nil {
			if k.close != nil {
				k.close(inst)
			}
			if len(errs) == 0 {
				p.cfg = cfg.Interface()
			}
			return errs
		}
		ce, isCE := errors.AsType[*rampart.ConfigError](err)
		if !isCE {
			return append(errs, &FieldError{Path: p.path, Err: err})
		}
		top := strings.Split(ce.Field, ".")[0]
		if _, ok := k.spec.FieldByName(top); !ok || top == "" {
			// A field the document does not set (Options.Ticker, a field
			// Configure set): the instance's error, in the policy's words.
			return append(errs, &FieldError{Path: p.path, Err: err})
		}
		if p.name == "" && inherited(spec, top) {
			// The defaults leave a field to the instances (a bulkhead's
			// max, a rate form): not an error of the defaults.
			return errs
		}
		path := p.path + "." + docPath(ce.Field)
		fromDefault := inherited(spec, top) && !def.IsNil() && !inherited(def, top)
		if !seen[path] && !(fromDefault && bad[ce.Field]) {
			seen[path] = true
			errs = append(errs, &FieldError{Path: path, Err: err, field: ce.Field})
		}
		if !unset(work, ce.Field) {
			return errs // a field the spec does not set: nothing left to clear
		}
	}
	return errs
}

// validatePipeline builds p (a pipeline) from throwaway policies built
// from the planned instances, so that pipeline.New's own checks run.
func (p *planned) validatePipeline(all []*planned, o *Options) error {
	byName := map[string]*planned{}
	for _, q := range all {
		byName[q.name] = q
	}
	insts := map[string]any{}
	defer func() {
		for key, inst := range insts {
			if k := kindByKey(key); k.close != nil {
				k.close(inst)
			}
		}
	}()
	for key, name := range p.slots {
		q := byName[name]
		if q == nil { // a ref to an invalid instance: reported there
			return nil
		}
		inst, err := q.kind.build(q.cfg)
		if err != nil {
			return &FieldError{Path: q.path, Err: err}
		}
		insts[key] = inst
	}
	pl, err := p.buildPipeline(insts, o)
	if err != nil {
		if ce, ok := errors.AsType[*rampart.ConfigError](err); ok {
			return &FieldError{Path: p.path + "." + docPath(ce.Field), Err: err}
		}
		return &FieldError{Path: p.path, Err: err}
	}
	_ = pl
	return nil
}

// buildPipeline builds the pipeline p from its policies by slot key.
func (p *planned) buildPipeline(insts map[string]any, o *Options) (*pipeline.Pipeline, error) {
	key := p.spec.(pipelineSpecKey)
	c := pipeline.Config{Name: p.name, Idempotent: key.Idempotent, CountStats: key.CountStats}
	cv := reflect.ValueOf(&c).Elem()
	for slot, inst := range insts {
		f := cv.FieldByName(pipelineField[slot])
		if !f.IsValid() || !reflect.TypeOf(inst).AssignableTo(f.Type()) {
			return nil, fmt.Errorf("a pipeline has no %s slot of type %T", slot, inst)
		}
		f.Set(reflect.ValueOf(inst))
	}
	o.apply(p.name, &c)
	return pipeline.New(c)
}

// pipelineField maps a slot key to its pipeline.Config field.
var pipelineField = map[string]string{
	"breaker": "Breaker", "rateLimiter": "RateLimit", "bulkhead": "Bulkhead", "adaptive": "Adaptive",
	"retry": "Retry", "timeout": "Timeout", "hedge": "Hedge", "shed": "Shed",
}

// fieldOfKey returns the Go name of the field of t whose JSON name is key.
func fieldOfKey(t reflect.Type, key string) string {
	for i := range t.NumField() {
		if jsonName(t.Field(i)) == key {
			return t.Field(i).Name
		}
	}
	panic("rampartconfig: no field " + key) // the kinds table and the types disagree: a test catches it
}

// fieldOfSection is fieldOfKey for a section name.
func fieldOfSection(t reflect.Type, section string) string { return fieldOfKey(t, section) }

// sortedKeys returns the keys of a map[string]T value, sorted.
func sortedKeys(m reflect.Value) []string {
	keys := make([]string, 0, m.Len())
	for _, k := range m.MapKeys() {
		keys = append(keys, k.String())
	}
	slices.Sort(keys)
	return keys
}

// mapsKeys is maps.Keys for the pipelines.
func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// unknownFields appends an error for every key of tree (a decoded
// document) that is no field of t, with its path.
func unknownFields(tree any, t reflect.Type, path string, errs *[]error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	join := func(key string) string {
		if path == "" {
			return key
		}
		return path + "." + key
	}
	switch t.Kind() {
	case reflect.Struct:
		if t == reflect.TypeFor[Duration]() {
			return
		}
		m, ok := tree.(map[string]any)
		if !ok {
			return // a type error: the strict decoder reports it
		}
		fields := map[string]reflect.Type{}
		jsonFields(t, fields)
		for _, key := range slices.Sorted(mapsKeys(m)) {
			ft, ok := fields[key]
			if !ok {
				*errs = append(*errs, &FieldError{Path: join(key), Err: errors.New("unknown field")})
				continue
			}
			unknownFields(m[key], ft, join(key), errs)
		}
	case reflect.Map:
		if m, ok := tree.(map[string]any); ok {
			for _, key := range slices.Sorted(mapsKeys(m)) {
				unknownFields(m[key], t.Elem(), join(key), errs)
			}
		}
	case reflect.Slice:
		if s, ok := tree.([]any); ok {
			for i, v := range s {
				unknownFields(v, t.Elem(), fmt.Sprintf("%s[%d]", path, i), errs)
			}
		}
	}
}

// jsonFields collects the document names of t's fields, those of its
// embedded structs included.
func jsonFields(t reflect.Type, out map[string]reflect.Type) {
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			jsonFields(f.Type, out)
			continue
		}
		if name := jsonName(f); name != "" && f.IsExported() {
			out[name] = f.Type
		}
	}
}
