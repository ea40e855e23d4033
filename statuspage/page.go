package statuspage

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/rampart-go/rampart/circuitbreaker"
)

// The chart of one instance, in SVG user units.
const (
	chartW     = 300
	chartH     = 64
	stripH     = 6 // the breaker's state strip under the chart
	chartColor = "#1f77b4"
	chartAlt   = "#d62728"
)

// stateColors are the breaker states' colours in the strip, by State.
var stateColors = [...]string{"#2ca02c", "#d62728", "#ff7f0e", "#7f7f7f", "#8c1a1a", "#17becf"}

type pageData struct {
	Title     string
	Refresh   int // seconds
	Interval  string
	Window    string
	Instances []pageInstance
}

type pageInstance struct {
	Name    string
	Kind    string
	Type    string
	Summary string
	Chart   template.HTML // an inline SVG built from numbers and escaped names only
	Stats   string        // indented JSON
	Actions []string
}

var page = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8"/>
<meta http-equiv="refresh" content="{{.Refresh}}"/>
<meta name="viewport" content="width=device-width, initial-scale=1"/>
<title>{{.Title}} status</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1em 2em;color:#222;background:#fff}
.instances{display:flex;flex-wrap:wrap;gap:1em}
.instance{border:1px solid #ccc;border-radius:6px;padding:.6em .8em;width:340px}
.instance h2{font-size:1em;margin:0 0 .2em}
.kind{color:#666;font-weight:normal}
.summary{font-family:ui-monospace,monospace;font-size:12px;margin:.2em 0}
form{display:inline}
details pre{font-size:11px;max-height:20em;overflow:auto}
</style>
</head>
<body>
<h1>{{.Title}} status</h1>
<p>Live state of {{len .Instances}} instance(s); one sample at most every {{.Interval}}, the last {{.Window}} charted; this page reloads every {{.Refresh}} s. <a href="status.json">status.json</a></p>
<div class="instances">
{{- range .Instances}}
<section class="instance" data-name="{{.Name}}" data-kind="{{.Kind}}">
<h2>{{.Name}} <span class="kind">{{.Kind}}</span></h2>
<div class="summary">{{.Summary}}</div>
{{.Chart}}
{{- if .Actions}}
<div class="actions">{{$name := .Name}}{{range .Actions}}
<form method="post" action="action"><input type="hidden" name="name" value="{{$name}}"/><input type="hidden" name="action" value="{{.}}"/><input type="hidden" name="redirect" value="1"/><button type="submit">{{.}}</button></form>{{end}}
</div>
{{- end}}
<details><summary>{{.Type}}</summary><pre>{{.Stats}}</pre></details>
</section>
{{- end}}
</div>
</body>
</html>
`))

func (h *Handler) servePage(w http.ResponseWriter, r *http.Request) {
	now := h.tk.Now()
	list := h.list()
	doc := h.document(r, now, list)
	data := pageData{
		Title:    h.cfg.Title,
		Refresh:  max(1, int(math.Ceil(h.cfg.Refresh.Seconds()))),
		Interval: h.cfg.Interval.String(),
		Window:   (time.Duration(h.cfg.Samples) * h.cfg.Interval).String(),
	}
	h.mu.Lock()
	rings := make(map[string][]sample, len(h.rings))
	for _, n := range list {
		// The ring of the instance listed, not of one it replaced since
		// the last sample (no sample was due).
		if rg := h.rings[n.name]; rg != nil && sameInstance(rg.inst, n.v) {
			rings[n.name] = rg.samples()
		}
	}
	h.mu.Unlock()
	for i, in := range doc.Instances {
		v := viewOf(list[i].v)
		b, _ := json.MarshalIndent(in.Stats, "", "  ")
		pi := pageInstance{Name: in.Name, Kind: in.Kind, Type: in.Type, Stats: string(b), Actions: in.Actions}
		if v.sample != nil {
			pi.Chart = template.HTML(h.chart(v, rings[in.Name], now))
			pi.Summary = summary(v, rings[in.Name])
		}
		data.Instances = append(data.Instances, pi)
	}
	var buf bytes.Buffer
	if err := page.Execute(&buf, data); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	noStore(w)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	// No script at all; inline styles only; forms post to this origin.
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
	_, _ = w.Write(buf.Bytes())
}

// point is one charted value: at reading t, value v of series k.
type point struct {
	t int64
	v float64
}

// values returns series k of ss as charted points: gauges as they are,
// counters as their rate per second since the previous sample (none where
// the count went down). A point that follows a gap longer than two
// intervals starts a new segment.
func (h *Handler) values(ss []sample, k int, counter bool) [][]point {
	var segs [][]point
	var cur []point
	for i, s := range ss {
		gap := i > 0 && s.t-ss[i-1].t > 2*int64(h.cfg.Interval)
		if gap && len(cur) > 0 {
			segs, cur = append(segs, cur), nil
		}
		if !counter {
			cur = append(cur, point{s.t, s.v[k]})
			continue
		}
		if i == 0 || gap || s.t <= ss[i-1].t || s.v[k] < ss[i-1].v[k] { // a count that went down: another instance (see sameInstance), no rate
			continue
		}
		cur = append(cur, point{s.t, (s.v[k] - ss[i-1].v[k]) / (float64(s.t-ss[i-1].t) / 1e9)})
	}
	if len(cur) > 0 {
		segs = append(segs, cur)
	}
	return segs
}

// chart draws the last Samples × Interval of an instance's ring as an SVG:
// one polyline per series and segment, the y axis from 0 to the largest
// value charted, the breaker's states as a strip under it.
func (h *Handler) chart(v view, ss []sample, now int64) string {
	window := int64(h.cfg.Samples) * int64(h.cfg.Interval)
	t0 := now - window
	var segs [2][][]point
	ymax := 0.0
	for k := range 2 {
		if v.series[k].name == "" {
			continue
		}
		segs[k] = h.values(ss, k, v.series[k].counter)
		for _, seg := range segs[k] {
			for _, p := range seg {
				if !math.IsNaN(p.v) && !math.IsInf(p.v, 0) {
					ymax = max(ymax, p.v)
				}
			}
		}
	}
	if ymax == 0 {
		ymax = 1
	}
	x := func(t int64) float64 { return float64(chartW) * float64(t-t0) / float64(window) }
	y := func(val float64) float64 { return chartH - chartH*math.Min(math.Max(val, 0), ymax)/ymax }
	height := chartH + 28 // the legend, then the time axis' labels
	if v.states {
		height += stripH + 2
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="spark" xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" data-ymax="%g" role="img">`, chartW, height, chartW, height, ymax)
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%d" height="%d" fill="#f8f8f8" stroke="#ddd"/>`, chartW, chartH)
	fmt.Fprintf(&b, `<text x="2" y="10" font-size="9" fill="#666">%s</text>`, template.HTMLEscapeString(fmt.Sprintf("%.4g", ymax)))
	colors := [2]string{chartColor, chartAlt}
	for k := range 2 {
		for _, seg := range segs[k] {
			var pts strings.Builder
			for i, p := range seg {
				if p.t < t0 {
					continue
				}
				if i > 0 && pts.Len() > 0 {
					pts.WriteByte(' ')
				}
				fmt.Fprintf(&pts, "%.1f,%.1f", x(p.t), y(p.v))
			}
			if pts.Len() == 0 {
				continue
			}
			fmt.Fprintf(&b, `<polyline class="series" data-series="%s" fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`,
				template.HTMLEscapeString(v.series[k].name), colors[k], pts.String())
		}
	}
	// The time axis: its two ends.
	fmt.Fprintf(&b, `<text class="time" x="0" y="%d" font-size="9" fill="#888">-%s</text><text class="time" x="%d" y="%d" font-size="9" fill="#888" text-anchor="end">now</text>`,
		height-2, template.HTMLEscapeString((time.Duration(window)).String()), chartW, height-2)
	legendY := chartH + 12
	if v.states {
		sy := chartH + 2
		for i, s := range ss {
			if s.t < t0 {
				continue
			}
			end := now
			if i+1 < len(ss) {
				end = ss[i+1].t
			}
			c := "#000"
			if int(s.state) < len(stateColors) && s.state >= 0 {
				c = stateColors[s.state]
			}
			fmt.Fprintf(&b, `<rect class="state" data-state="%s" x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"/>`, stateName(s.state), x(s.t), sy, math.Max(x(end)-x(s.t), 0.5), stripH, c)
		}
		legendY += stripH + 2
	}
	lx := 0
	for k := range 2 {
		if v.series[k].name == "" {
			continue
		}
		name := template.HTMLEscapeString(v.series[k].name)
		fmt.Fprintf(&b, `<g class="legend"><rect x="%d" y="%d" width="10" height="3" fill="%s"/><text x="%d" y="%d" font-size="10" fill="#444">%s</text></g>`, lx, legendY-4, colors[k], lx+13, legendY, name)
		lx += 20 + 6*len(v.series[k].name)
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// summary is the latest values of an instance's series, in words.
func summary(v view, ss []sample) string {
	if len(ss) == 0 {
		return "no sample yet"
	}
	last := ss[len(ss)-1]
	var parts []string
	if v.states {
		parts = append(parts, "state "+stateName(last.state))
	}
	for k := range 2 {
		sr := v.series[k]
		if sr.name == "" {
			continue
		}
		if sr.counter {
			if len(ss) < 2 || last.t <= ss[len(ss)-2].t || last.v[k] < ss[len(ss)-2].v[k] { // no rate, as in values
				continue
			}
			prev := ss[len(ss)-2]
			parts = append(parts, fmt.Sprintf("%s %.4g", sr.name, (last.v[k]-prev.v[k])/(float64(last.t-prev.t)/1e9)))
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.4g", sr.name, last.v[k]))
	}
	return strings.Join(parts, " · ")
}

func stateName(s int8) string { return circuitbreaker.State(s).String() }
