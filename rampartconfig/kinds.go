package rampartconfig

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/adaptive"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/hedge"
	"github.com/rampart-go/rampart/ratelimit"
	"github.com/rampart-go/rampart/retry"
	"github.com/rampart-go/rampart/shed"
	"github.com/rampart-go/rampart/timeout"
)

// kind is what the loader and the applier know of one policy kind: where
// it sits in the document, how its spec becomes a Config, and how an
// instance is built, updated and closed.
type kind struct {
	key     string       // the defaults key and the pipeline slot: "breaker"
	section string       // the document section of named instances: "breakers"
	spec    reflect.Type // *BreakerSpec's element
	config  reflect.Type // circuitbreaker.Config
	// setName sets the Config's Name (a pointer to config).
	setName func(cfg any, name string)
	// build is the kind's New (cfg a pointer to config).
	build func(cfg any) (any, error)
	// update is the instance's Update (cfg a pointer to config), nil for a
	// kind without one (every field fixed: see changedField).
	update func(inst, cfg any) error
	// close releases what build started (Hedger, Timeout), nil if nothing.
	close func(inst any)
	// enums maps a string field's spec name to its values.
	enums map[string]map[string]uint64
}

// kinds lists the policy kinds in document order. A pipeline is handled
// apart (it has no Update).
var kinds = []*kind{
	{
		key: "breaker", section: "breakers",
		spec: reflect.TypeFor[BreakerSpec](), config: reflect.TypeFor[circuitbreaker.Config](),
		setName: func(c any, n string) { c.(*circuitbreaker.Config).Name = n },
		build:   func(c any) (any, error) { return circuitbreaker.New(*c.(*circuitbreaker.Config)) },
		update:  func(i, c any) error { return i.(*circuitbreaker.Breaker).Update(*c.(*circuitbreaker.Config)) },
		enums: map[string]map[string]uint64{"Mode": {
			"count": uint64(circuitbreaker.CountWindow), "time": uint64(circuitbreaker.TimeWindow), "consecutive": uint64(circuitbreaker.Consecutive),
		}},
	},
	{
		key: "rateLimiter", section: "rateLimiters",
		spec: reflect.TypeFor[RateLimiterSpec](), config: reflect.TypeFor[ratelimit.Config](),
		setName: func(c any, n string) { c.(*ratelimit.Config).Name = n },
		build:   func(c any) (any, error) { return ratelimit.New(*c.(*ratelimit.Config)) },
		update:  func(i, c any) error { return i.(*ratelimit.Limiter).Update(*c.(*ratelimit.Config)) },
	},
	{
		key: "shardedRateLimiter", section: "shardedRateLimiters",
		spec: reflect.TypeFor[ShardedRateLimiterSpec](), config: reflect.TypeFor[ratelimit.ShardedConfig](),
		setName: func(c any, n string) { c.(*ratelimit.ShardedConfig).Name = n },
		build:   func(c any) (any, error) { return ratelimit.NewSharded(*c.(*ratelimit.ShardedConfig)) },
		update:  func(i, c any) error { return i.(*ratelimit.Sharded).Update(*c.(*ratelimit.ShardedConfig)) },
	},
	{
		key: "bulkhead", section: "bulkheads",
		spec: reflect.TypeFor[BulkheadSpec](), config: reflect.TypeFor[bulkhead.Config](),
		setName: func(c any, n string) { c.(*bulkhead.Config).Name = n },
		build:   func(c any) (any, error) { return bulkhead.New(*c.(*bulkhead.Config)) },
		update:  func(i, c any) error { return i.(*bulkhead.Bulkhead).Update(*c.(*bulkhead.Config)) },
	},
	{
		key: "adaptive", section: "adaptiveLimiters",
		spec: reflect.TypeFor[AdaptiveSpec](), config: reflect.TypeFor[adaptive.Config](),
		setName: func(c any, n string) { c.(*adaptive.Config).Name = n },
		build:   func(c any) (any, error) { return adaptive.New(*c.(*adaptive.Config)) },
		update:  func(i, c any) error { return i.(*adaptive.Limiter).Update(*c.(*adaptive.Config)) },
	},
	{
		key: "retry", section: "retries",
		spec: reflect.TypeFor[RetrySpec](), config: reflect.TypeFor[retry.Config](),
		setName: func(c any, n string) { c.(*retry.Config).Name = n },
		build:   func(c any) (any, error) { return retry.New(*c.(*retry.Config)) },
		update:  func(i, c any) error { return i.(*retry.Policy).Update(*c.(*retry.Config)) },
		enums: map[string]map[string]uint64{"Backoff": {
			"full-jitter": uint64(retry.FullJitter), "exponential": uint64(retry.Exponential), "constant": uint64(retry.Constant),
			"linear": uint64(retry.Linear), "equal-jitter": uint64(retry.EqualJitter), "decorrelated-jitter": uint64(retry.DecorrelatedJitter),
		}},
	},
	{
		key: "timeout", section: "timeouts",
		spec: reflect.TypeFor[TimeoutSpec](), config: reflect.TypeFor[timeout.Config](),
		setName: func(c any, n string) { c.(*timeout.Config).Name = n },
		build:   func(c any) (any, error) { return timeout.New(*c.(*timeout.Config)) },
		update:  func(i, c any) error { return i.(*timeout.Timeout).Update(*c.(*timeout.Config)) },
		close:   func(i any) { _ = i.(*timeout.Timeout).Close() },
		enums: map[string]map[string]uint64{"Mode": {
			"deadline": uint64(timeout.ModeDeadline), "soft": uint64(timeout.ModeSoft),
		}},
	},
	{
		key: "hedge", section: "hedgers",
		spec: reflect.TypeFor[HedgeSpec](), config: reflect.TypeFor[hedge.Config](),
		setName: func(c any, n string) { c.(*hedge.Config).Name = n },
		build:   func(c any) (any, error) { return hedge.New(*c.(*hedge.Config)) },
		update:  func(i, c any) error { return i.(*hedge.Hedger).Update(*c.(*hedge.Config)) },
		close:   func(i any) { _ = i.(*hedge.Hedger).Close() },
	},
	{
		// A Shedder has no Update (update nil): every field is fixed.
		key: "shed", section: "shedders",
		spec: reflect.TypeFor[ShedSpec](), config: reflect.TypeFor[shed.Config](),
		setName: func(c any, n string) { c.(*shed.Config).Name = n },
		build:   func(c any) (any, error) { return shed.New(*c.(*shed.Config)) },
	},
}

// changedField returns the error of a kind without Update (update nil)
// asked to take another Config: a *rampart.ConfigError naming the first
// field that differs (funcs, and interfaces holding a func, compared by
// identity: sameField), nil when none does.
func changedField(k *kind, old, cfg any) error {
	o, n := reflect.ValueOf(old).Elem(), reflect.ValueOf(cfg).Elem()
	for i := range o.NumField() {
		fo, fn := o.Field(i), n.Field(i)
		if !sameField(fo, fn) {
			return rampart.NewConfigError(k.key, o.Type().Field(i).Name, "is fixed at construction: a %s has no Update (mark it replace: true to rebuild it)", k.config.PkgPath()[strings.LastIndex(k.config.PkgPath(), "/")+1:])
		}
	}
	return nil
}

// kindByKey returns the kind of a defaults key or pipeline slot.
func kindByKey(key string) *kind {
	for _, k := range kinds {
		if k.key == key {
			return k
		}
	}
	return nil
}

// jsonName returns a spec field's document name.
func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	return name
}

// isMeta reports whether a spec field is not a policy field (the embedded
// Meta or Ref).
func isMeta(f reflect.StructField) bool { return f.Anonymous }

// merge returns a copy of spec (a *XSpec, may be nil) whose absent fields
// are taken from def (may be nil).
func merge(spec, def reflect.Value) reflect.Value {
	out := reflect.New(spec.Type().Elem())
	if !spec.IsNil() {
		out.Elem().Set(deepCopy(spec.Elem()))
	}
	if def.IsNil() {
		return out
	}
	o, d := out.Elem(), def.Elem()
	for i := range o.NumField() {
		f := o.Type().Field(i)
		switch {
		case f.Name == "Meta":
			if o.Field(i).FieldByName("Groups").IsNil() {
				o.Field(i).FieldByName("Groups").Set(d.Field(i).FieldByName("Groups"))
			}
			if d.Field(i).FieldByName("Replace").Bool() { // replace: true in the defaults marks every instance
				o.Field(i).FieldByName("Replace").SetBool(true)
			}
		case o.Field(i).IsNil():
			o.Field(i).Set(deepCopy(d.Field(i)))
		}
	}
	return out
}

// deepCopy returns a copy of v sharing no pointer, slice or map with it:
// the merged spec is kept as the applied one, and a Document's fields may
// be written through after an Apply.
func deepCopy(v reflect.Value) reflect.Value {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return v
		}
		c := reflect.New(v.Type().Elem())
		c.Elem().Set(deepCopy(v.Elem()))
		return c
	case reflect.Slice:
		if v.IsNil() {
			return v
		}
		c := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		for i := range v.Len() {
			c.Index(i).Set(deepCopy(v.Index(i)))
		}
		return c
	case reflect.Map:
		if v.IsNil() {
			return v
		}
		c := reflect.MakeMapWithSize(v.Type(), v.Len())
		for it := v.MapRange(); it.Next(); {
			c.SetMapIndex(it.Key(), deepCopy(it.Value()))
		}
		return c
	case reflect.Struct:
		c := reflect.New(v.Type()).Elem()
		c.Set(v)
		for i := range v.NumField() {
			if c.Field(i).CanSet() {
				c.Field(i).Set(deepCopy(v.Field(i)))
			}
		}
		return c
	}
	return v
}

// inherited reports whether spec's field name was taken from the
// defaults (absent in own).
func inherited(own reflect.Value, name string) bool {
	if own.IsNil() {
		return true
	}
	f := own.Elem().FieldByName(name)
	return !f.IsValid() || f.IsNil() // a code-level field (Ticker, a listener) is no spec's
}

// fill sets the fields of cfg (a struct value, settable) from spec (a
// struct value) by name. It returns the errors of values that no Config
// field can take (an unknown enum name), with path as their prefix.
func fill(k *kind, cfg, spec reflect.Value, path string) []error {
	var errs []error
	for i := range spec.NumField() {
		f := spec.Type().Field(i)
		if isMeta(f) {
			continue
		}
		v := spec.Field(i)
		if v.IsNil() {
			continue
		}
		p := path + "." + jsonName(f)
		if f.Name == "Algorithm" {
			alg, es := algorithm(v.Interface().(*AlgorithmSpec), p)
			if len(es) > 0 {
				errs = append(errs, es...) // the Config keeps the default algorithm, for New to check the rest
				continue
			}
			cfg.FieldByName("Algorithm").Set(reflect.ValueOf(&alg).Elem())
			continue
		}
		dst := cfg.FieldByName(f.Name)
		switch v.Kind() {
		case reflect.Slice: // partitions
			s := reflect.MakeSlice(dst.Type(), v.Len(), v.Len())
			for j := range v.Len() {
				errs = append(errs, fill(k, s.Index(j), v.Index(j), fmt.Sprintf("%s[%d]", p, j))...)
			}
			dst.Set(s)
			continue
		}
		e := v.Elem()
		switch {
		case e.Kind() == reflect.Struct: // queue
			errs = append(errs, fill(k, dst, e, p)...)
		case e.Type() == reflect.TypeFor[Duration]():
			dst.SetInt(e.Int())
		case e.Kind() == reflect.String && dst.Kind() != reflect.String:
			vals := k.enums[f.Name]
			n, ok := vals[e.String()]
			if !ok {
				names := make([]string, 0, len(vals))
				for name := range vals {
					names = append(names, fmt.Sprintf("%q", name))
				}
				slices.Sort(names)
				errs = append(errs, &FieldError{Path: p, Err: fmt.Errorf("must be one of %s, got %q", strings.Join(names, ", "), e.String())})
				continue
			}
			dst.SetUint(n)
		default:
			dst.Set(e.Convert(dst.Type()))
		}
	}
	return errs
}

// algorithm returns the adaptive.Algorithm a spec names, or the errors of
// its fields, each at its own path (adaptiveLimiters.a.algorithm.gradient2.tolerance):
// adaptive's New would report the first one only, at "Algorithm".
func algorithm(a *AlgorithmSpec, path string) (adaptive.Algorithm, []error) {
	var set []string
	var alg adaptive.Algorithm
	var spec reflect.Value // the one algorithm's spec (a struct)
	if a.Vegas != nil {
		var v adaptive.Vegas
		fill(nil, reflect.ValueOf(&v).Elem(), reflect.ValueOf(a.Vegas).Elem(), path)
		set, alg, spec = append(set, "vegas"), v, reflect.ValueOf(a.Vegas).Elem()
	}
	if a.AIMD != nil {
		var v adaptive.AIMD
		fill(nil, reflect.ValueOf(&v).Elem(), reflect.ValueOf(a.AIMD).Elem(), path)
		set, alg, spec = append(set, "aimd"), v, reflect.ValueOf(a.AIMD).Elem()
	}
	if a.Gradient2 != nil {
		var v adaptive.Gradient2
		fill(nil, reflect.ValueOf(&v).Elem(), reflect.ValueOf(a.Gradient2).Elem(), path)
		set, alg, spec = append(set, "gradient2"), v, reflect.ValueOf(a.Gradient2).Elem()
	}
	if len(set) != 1 {
		return nil, []error{&FieldError{Path: path, Err: fmt.Errorf("must set exactly one of vegas, aimd, gradient2, got %d", len(set))}}
	}
	if errs := algorithmErrors(alg, spec, path+"."+set[0]); len(errs) > 0 {
		return nil, errs
	}
	return alg, nil
}

// validator is an algorithm that validates its fields (adaptive's own).
type validator interface{ Validate() error }

// algorithmErrors validates alg, built from spec, and maps its errors to
// the fields' paths under path: every field the spec sets is validated
// alone (the others at their defaults), and a field that fails alone is
// reported at its path; an error no single field makes (Vegas's beta not
// above alpha, both set) is reported at path.
func algorithmErrors(alg adaptive.Algorithm, spec reflect.Value, path string) []error {
	v, ok := alg.(validator)
	if !ok {
		return nil
	}
	whole := v.Validate()
	if whole == nil {
		return nil
	}
	at := reflect.ValueOf(alg).Type()
	var errs []error
	for i := range spec.NumField() {
		f := spec.Type().Field(i)
		if spec.Field(i).IsNil() {
			continue
		}
		one := reflect.New(spec.Type()).Elem()
		one.Field(i).Set(spec.Field(i))
		solo := reflect.New(at).Elem()
		fill(nil, solo, one, path)
		err := solo.Interface().(validator).Validate()
		if err == nil {
			continue
		}
		field := at.Name() + "." + f.Name
		reason := strings.TrimPrefix(err.Error(), field+" ")
		errs = append(errs, &FieldError{Path: path + "." + jsonName(f), Err: rampart.NewConfigError("adaptive", "Algorithm."+field, "%s", reason)})
	}
	if len(errs) == 0 {
		errs = append(errs, &FieldError{Path: path, Err: rampart.NewConfigError("adaptive", "Algorithm."+at.Name(), "%v", whole)})
	}
	return errs
}

// unset clears the spec field a Config field path names ("Queue.Target"),
// reporting whether it was set. It is how validation finds the next error
// of one instance: New reports the first invalid field only.
func unset(spec reflect.Value, field string) bool {
	v := spec.Elem()
	parts := strings.Split(field, ".")
	for i, name := range parts {
		f := v.FieldByName(name)
		if !f.IsValid() || f.Kind() != reflect.Pointer && f.Kind() != reflect.Slice {
			return false
		}
		if f.IsNil() {
			return false
		}
		if i == len(parts)-1 {
			f.Set(reflect.Zero(f.Type()))
			return true
		}
		if f.Kind() != reflect.Pointer || f.Elem().Kind() != reflect.Struct {
			return false
		}
		c := reflect.New(f.Elem().Type()) // copy before changing: the spec may share it
		c.Elem().Set(f.Elem())
		f.Set(c)
		v = c.Elem()
	}
	return false
}

// docPath maps a Config field path ("Queue.MaxLength") to the document's
// ("queue.maxLength").
func docPath(field string) string {
	parts := strings.Split(field, ".")
	for i, p := range parts {
		parts[i] = lowerCamel(p)
	}
	return strings.Join(parts, ".")
}

// lowerCamel is a Go field name's document name: FailureRateThreshold is
// failureRateThreshold, FIFO fifo, AIMD aimd.
func lowerCamel(s string) string {
	n := 0
	for n < len(s) && s[n] >= 'A' && s[n] <= 'Z' {
		n++
	}
	switch {
	case n == 0:
		return s
	case n == 1 || n == len(s):
		return strings.ToLower(s[:n]) + s[n:]
	default: // an initialism followed by a word: keep the word's capital
		return strings.ToLower(s[:n-1]) + s[n-1:]
	}
}
