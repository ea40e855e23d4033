package statuspage

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rampart-go/rampart"
)

// Source lists named instances, calling f for each until f returns false.
// A registry of named instances satisfies it; so does any type of the
// program's with this method. Range must be safe to call from the
// handler's goroutines while the program runs.
type Source interface {
	Range(f func(name string, instance any) bool)
}

// Instance is one named instance in Config.Instances: a policy
// (*circuitbreaker.Breaker, *bulkhead.Bulkhead, ...), a retry budget, a
// chaos injector or a pipeline.
type Instance struct {
	Name  string
	Value any
}

// Config configures a Handler. The zero Config is valid: a page with no
// instances, read-only.
type Config struct {
	// Title heads the page. Default "rampart".
	Title string

	// Instances are shown under their names, before any of Source's of the
	// same name. Names must be unique and non-empty, values non-nil (nor a
	// nil pointer, map, func, chan or slice in the interface: a typed nil).
	Instances []Instance

	// Source, when not nil, is ranged over at every sample and every
	// request: instances may come and go. Its entries with an empty name
	// or a nil value (typed or not) are left out.
	Source Source

	// Ticker times the samples and is the clock budgets are read at.
	// Nil means rampart.DefaultTicker(). Give it the instances' ticker.
	Ticker rampart.Ticker

	// Interval is the shortest time between two samples. Default 1 s.
	// Samples × Interval, the window charted, must fit in a
	// time.Duration (about 292 years).
	Interval time.Duration

	// Samples is the length of each instance's ring. Default 300; at most
	// 100000.
	Samples int

	// Refresh is the page's meta refresh period. Default 5 s.
	Refresh time.Duration

	// Authorize, when not nil, enables the actions: a POST to .../action
	// is carried out only when Authorize returns true for it (otherwise
	// 403), and the page shows the action buttons only to requests it
	// accepts. Nil: read-only, every action is refused with 403.
	Authorize func(*http.Request) bool
}

const (
	defaultInterval = time.Second
	defaultSamples  = 300
	maxSamples      = 100_000
	defaultRefresh  = 5 * time.Second
)

// Handler serves the status page, its JSON and its actions. Create it with
// New; it is safe for concurrent use.
type Handler struct {
	cfg   Config
	tk    rampart.Ticker
	mu    sync.Mutex // guards rings and last
	rings map[string]*ring
	last  int64 // reading of the last sample; rampart.NotRead before the first
}

// New returns a Handler for c, or a *rampart.ConfigError when a field is
// invalid: a negative Interval, Samples or Refresh, Samples above 100000,
// a window (Samples, or its default, × Interval) beyond a time.Duration,
// an Instance with an empty name, a nil value (typed or not) or a name
// already listed.
func New(c Config) (*Handler, error) {
	n := c.Samples
	if n == 0 {
		n = defaultSamples
	}
	switch {
	case c.Interval < 0:
		return nil, rampart.NewConfigError("statuspage", "Interval", "must not be negative, got %v", c.Interval)
	case c.Samples < 0 || c.Samples > maxSamples:
		return nil, rampart.NewConfigError("statuspage", "Samples", "must be in [0, %d], got %d", maxSamples, c.Samples)
	case c.Refresh < 0:
		return nil, rampart.NewConfigError("statuspage", "Refresh", "must not be negative, got %v", c.Refresh)
	case c.Interval > 0 && int64(n) > math.MaxInt64/int64(c.Interval):
		return nil, rampart.NewConfigError("statuspage", "Interval", "Samples × Interval (the window charted) must fit in a time.Duration, got %d × %v", n, c.Interval)
	}
	seen := make(map[string]bool, len(c.Instances))
	for i, in := range c.Instances {
		switch {
		case in.Name == "":
			return nil, rampart.NewConfigError("statuspage", "Instances", "[%d] has no name", i)
		case isNil(in.Value):
			return nil, rampart.NewConfigError("statuspage", "Instances", "[%d] (%q) has a nil value", i, in.Name)
		case seen[in.Name]:
			return nil, rampart.NewConfigError("statuspage", "Instances", "[%d]: the name %q is listed twice", i, in.Name)
		}
		seen[in.Name] = true
	}
	if c.Title == "" {
		c.Title = "rampart"
	}
	if c.Interval == 0 {
		c.Interval = defaultInterval
	}
	if c.Samples == 0 {
		c.Samples = defaultSamples
	}
	if c.Refresh == 0 {
		c.Refresh = defaultRefresh
	}
	c.Instances = slices.Clone(c.Instances)
	tk := c.Ticker
	if tk == nil {
		tk = rampart.DefaultTicker()
	}
	return &Handler{cfg: c, tk: tk, rings: map[string]*ring{}, last: rampart.NotRead}, nil
}

// named is one instance listed at a sample or a request.
type named struct {
	name string
	v    any
}

// list returns the instances, explicit ones first in name order merged
// with Source's: sorted by name, each name once.
func (h *Handler) list() []named {
	out := make([]named, 0, len(h.cfg.Instances))
	seen := make(map[string]bool, len(h.cfg.Instances))
	for _, in := range h.cfg.Instances {
		out = append(out, named{in.Name, in.Value})
		seen[in.Name] = true
	}
	if h.cfg.Source != nil {
		h.cfg.Source.Range(func(name string, v any) bool {
			if name != "" && !isNil(v) && !seen[name] {
				seen[name] = true
				out = append(out, named{name, v})
			}
			return true
		})
	}
	slices.SortFunc(out, func(a, b named) int { return strings.Compare(a.name, b.name) })
	return out
}

// isNil reports whether v is nil, or a nil pointer, map, func, chan or
// slice in an interface (a typed nil), whose Stats or accessors would
// panic (reflect: New and the listing only, never a policy's call path).
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Func, reflect.Chan, reflect.Slice, reflect.UnsafePointer:
		return rv.IsNil()
	}
	return false
}

// sameInstance reports whether the ring of instance a may go on with the
// samples of b: a and b are the same instance (the same pointer, for the
// policies), or b is an uncomparable value of a's type, which cannot be
// told apart from a (a value type of the user's with a Stats method; a
// replacement then restarts its counters' rates, see values).
func sameInstance(a, b any) bool {
	if reflect.TypeOf(a) != reflect.TypeOf(b) {
		return false
	}
	if !reflect.ValueOf(b).Comparable() {
		return true
	}
	return a == b
}

// Sample takes one sample of every instance now, whatever the time since
// the last one. Handler.Run and the requests call it; a program with a
// loop of its own may too.
func (h *Handler) Sample() { h.SampleAt(h.tk.Now()) }

// SampleAt is Sample at the reading now of Config.Ticker.
func (h *Handler) SampleAt(now int64) {
	list := h.list()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sampleLocked(now, list)
}

func (h *Handler) sampleLocked(now int64, list []named) {
	h.last = now
	keep := make(map[string]bool, len(list))
	for _, n := range list {
		keep[n.name] = true
		v := viewOf(n.v)
		if v.sample == nil {
			continue
		}
		r := h.rings[n.name]
		if r == nil || r.kind != v.kind || !sameInstance(r.inst, n.v) { // another instance under the name: a history of its own
			r = newRing(v.kind, n.v, h.cfg.Samples)
			h.rings[n.name] = r
		}
		s := sample{t: now}
		s.v, s.state = v.sample(now)
		r.push(s)
	}
	for name := range h.rings {
		if !keep[name] {
			delete(h.rings, name)
		}
	}
}

// sampleIfDue samples when the last sample is Interval old or more.
func (h *Handler) sampleIfDue(now int64, list []named) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.last == rampart.NotRead || now-h.last >= int64(h.cfg.Interval) || now < h.last {
		h.sampleLocked(now, list)
	}
}

// Run samples every Config.Interval of real time until ctx ends, then
// returns ctx's error. Start it on a goroutine of the program's when the
// charts must have no gaps; the handler starts none itself.
func (h *Handler) Run(ctx context.Context) error {
	t := time.NewTicker(h.cfg.Interval)
	defer t.Stop()
	h.Sample()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			h.Sample()
		}
	}
}

// ServeHTTP serves the JSON (a path ending in /status.json), the actions
// (a path ending in /action, POST only) and the page (any other path).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case strings.HasSuffix(p, "/action") || p == "action":
		h.serveAction(w, r)
	case strings.HasSuffix(p, "/status.json") || p == "status.json":
		if !getOrHead(w, r) {
			return
		}
		h.serveJSON(w, r)
	default:
		if !getOrHead(w, r) {
			return
		}
		h.servePage(w, r)
	}
}

func getOrHead(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", "GET, HEAD")
	http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	return false
}

// authorized reports whether Authorize is set and accepts r.
func (h *Handler) authorized(r *http.Request) bool {
	return h.cfg.Authorize != nil && h.cfg.Authorize(r)
}

// Document is the JSON at .../status.json.
type Document struct {
	Now       int64          `json:"now"`       // the reading of Config.Ticker the document was built at
	Actions   bool           `json:"actions"`   // whether this request may POST actions
	Instances []InstanceJSON `json:"instances"` // sorted by name
}

// InstanceJSON is one instance in a Document.
type InstanceJSON struct {
	Name    string   `json:"name"`
	Kind    string   `json:"kind"`              // "circuitbreaker", "bulkhead", ... (see the package doc); "other" for an unknown type
	Type    string   `json:"type"`              // the Go type, e.g. "*circuitbreaker.Breaker"
	Stats   any      `json:"stats,omitempty"`   // the instance's Stats and accessors
	Actions []string `json:"actions,omitempty"` // the actions this request may POST for it
}

// document builds the Document for r at now, sampling when due.
func (h *Handler) document(r *http.Request, now int64, list []named) Document {
	h.sampleIfDue(now, list)
	auth := h.authorized(r)
	doc := Document{Now: now, Actions: auth, Instances: make([]InstanceJSON, 0, len(list))}
	for _, n := range list {
		v := viewOf(n.v)
		in := InstanceJSON{Name: n.name, Kind: v.kind, Type: typeName(n.v)}
		if v.stats != nil {
			in.Stats = v.stats(now)
		}
		if auth {
			for _, a := range v.actions {
				in.Actions = append(in.Actions, a.name)
			}
		}
		doc.Instances = append(doc.Instances, in)
	}
	return doc
}

func noStore(w http.ResponseWriter) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
}

func (h *Handler) serveJSON(w http.ResponseWriter, r *http.Request) {
	doc := h.document(r, h.tk.Now(), h.list())
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	noStore(w)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(b, '\n'))
}

// serveAction carries out one action: POST only (405), authorised (403),
// from this origin (403), on a listed instance (404) of a kind that has
// it (400). Form fields: name, action; redirect=1 answers 303 to the page
// (the page's buttons), otherwise the instance's JSON.
func (h *Handler) serveAction(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		http.Error(w, "actions are POST only", http.StatusMethodNotAllowed)
		return
	}
	if !sameOrigin(r) {
		http.Error(w, "cross-origin action refused", http.StatusForbidden)
		return
	}
	if !h.authorized(r) {
		http.Error(w, "actions are not authorised", http.StatusForbidden)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form: "+err.Error(), http.StatusBadRequest)
		return
	}
	name, act := r.PostFormValue("name"), r.PostFormValue("action")
	var target any
	for _, n := range h.list() {
		if n.name == name {
			target = n.v
			break
		}
	}
	if target == nil {
		http.Error(w, "no instance named "+quote(name), http.StatusNotFound)
		return
	}
	v := viewOf(target)
	i := slices.IndexFunc(v.actions, func(a action) bool { return a.name == act })
	if i < 0 {
		http.Error(w, "no action "+quote(act)+" for a "+v.kind, http.StatusBadRequest)
		return
	}
	v.actions[i].do()
	// Sample at once, so that the page shows the change.
	h.Sample()
	noStore(w)
	if r.PostFormValue("redirect") == "1" {
		http.Redirect(w, r, "./", http.StatusSeeOther)
		return
	}
	now := h.tk.Now()
	in := InstanceJSON{Name: name, Kind: v.kind, Type: typeName(target), Stats: v.stats(now)}
	for _, a := range v.actions {
		in.Actions = append(in.Actions, a.name)
	}
	b, err := json.MarshalIndent(in, "", "  ")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(b, '\n'))
}

// sameOrigin reports whether r carries no Origin header, or one whose host
// is the request's own.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host)
}

// quote is s as a JSON string, for error messages.
func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
