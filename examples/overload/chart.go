package main

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"html/template"
	"io"
	"math"
	"strings"
)

// The chart's layout, in SVG user units: two columns (unprotected, then
// protected) of four panels, each row on one y axis shared by both columns
// and every panel on one time axis.
const (
	svgW      = 1200
	marginL   = 70
	marginR   = 20
	colGap    = 60
	colW      = (svgW - marginL - marginR - colGap) / 2
	headerH   = 84
	panelH    = 160
	rowGap    = 86 // below each panel: the x axis, its label and the row's legend
	footerH   = 30
	rowsCount = 4
	svgH      = headerH + rowsCount*(panelH+rowGap) + footerH
)

// seriesDef is one line of a row: its key (data-series), label, colour and
// how to read it from a point (false: no value at that point).
type seriesDef struct {
	key, label, color string
	dash              bool
	get               func(mode string, p point) (float64, bool)
}

// rowDef is one row of panels.
type rowDef struct {
	key, title string
	log        bool // a log10 y axis (latency), from the decade of the least value, at most 1
	series     []seriesDef
	fixedMax   float64 // when not 0, the y axis ends there (a percentage: 100)

	// state, when set, gives the state drawn as a strip at the top of the
	// panel ("": none at that point), coloured by stateColors, with
	// stateLegend's states in the legend; a panel with no state at all
	// says noData instead.
	state       func(point) string
	stateLabel  string
	stateColors map[string]string
	stateLegend []string
	noData      string
}

// chartSpec is one scenario's chart: the files' base name, the rows, the
// phase shaded red, the title and the page's introduction.
type chartSpec struct {
	base     string
	rows     []rowDef
	redPhase string
	title    func(rec recording) string
	intro    func(rec recording) string // the HTML page's first paragraph, before "Recorded with"
}

// factor is x as "4×" text, or unknown when x was not recorded (a
// recording older than its slow_factor and cpu_load fields).
func factor(x float64, unknown string) string {
	if x > 0 {
		return fmt.Sprintf("%g×", x)
	}
	return unknown
}

// article is "a" or "an" before s, read aloud ("an 8×", "an 11×", "a 4×").
func article(s string) string {
	whole, _, _ := strings.Cut(strings.TrimSuffix(s, "×"), ".")
	if strings.HasPrefix(whole, "8") || whole == "11" || whole == "18" {
		return "an"
	}
	return "a"
}

// specOf is the chart of rec's scenario.
func specOf(rec recording) chartSpec {
	if rec.Scenario == "cpu" {
		return cpuChart
	}
	return dbChart
}

func always(f func(point) float64) func(string, point) (float64, bool) {
	return func(_ string, p point) (float64, bool) { return f(p), true }
}

func protectedOnly(f func(point) float64) func(string, point) (float64, bool) {
	return func(mode string, p point) (float64, bool) { return f(p), mode == "protected" }
}

func positive(f func(point) float64) func(string, point) (float64, bool) {
	return func(_ string, p point) (float64, bool) { v := f(p); return v, v > 0 }
}

var dbChart = chartSpec{
	base:     "overload",
	rows:     dbRows,
	redPhase: "slowdown",
	title: func(rec recording) string {
		return fmt.Sprintf("Overload demo: %d req/s offered, unprotected vs protected by rampart", rec.Rate)
	},
	intro: func(rec recording) string {
		slow := "a database slowdown"
		if f := factor(rec.SlowFactor, ""); f != "" {
			slow = article(f) + " " + f + " database slowdown"
		}
		return fmt.Sprintf("%d req/s offered through warm-up, steady, %s (shaded red) and recovery; the same load and axes on both sides.", rec.Rate, slow)
	},
}

var cpuChart = chartSpec{
	base:     "overload-cpu",
	rows:     cpuRows,
	redPhase: "overload",
	title: func(rec recording) string {
		c := 0.0
		for _, r := range rec.Runs {
			if len(r.Points) > 0 {
				c = math.Max(c, r.Points[0].Capacity)
			}
		}
		return fmt.Sprintf("CPU-bound overload: %s the measured capacity (up to %.0f req/s) offered, unprotected vs protected by rampart's shed", factor(rec.CPULoad, "a multiple of"), c)
	},
	intro: func(rec recording) string {
		return fmt.Sprintf("A CPU-bound handler offered half its measured capacity, then %s it (shaded red), then half again; each run measures the capacity just before it.", factor(rec.CPULoad, "a multiple of"))
	},
}

var cpuRows = []rowDef{
	{key: "throughput", title: "requests per second", series: []seriesDef{
		{"offered", "offered", "#7f7f7f", true, always(func(p point) float64 { return p.Offered })},
		{"sent", "sent (the rest dropped by the generator)", "#000000", false, always(func(p point) float64 { return p.Sent })},
		{"succeeded", "succeeded (200)", "#2ca02c", false, always(func(p point) float64 { return p.Succeeded })},
		{"shed", "shed (503 + Retry-After)", "#ff7f0e", false, always(func(p point) float64 { return p.Shed })},
		{"failed", "failed (timeouts, 5xx)", "#d62728", false, always(func(p point) float64 { return p.Failed })},
		{"capacity", "capacity measured before the run", "#1f77b4", true, positive(func(p point) float64 { return p.Capacity })},
	}},
	{key: "latency", title: "latency of the successes, ms (log scale)", log: true, series: []seriesDef{
		{"p50", "p50", "#1f77b4", false, positive(func(p point) float64 { return p.P50ms })},
		{"p99", "p99", "#9467bd", false, positive(func(p point) float64 { return p.P99ms })},
	}},
	{key: "in_flight", title: "requests in flight", series: []seriesDef{
		{"in_flight_client", "client", "#1f77b4", false, always(func(p point) float64 { return float64(p.InFlightClient) })},
		{"in_flight_server", "server", "#17becf", false, always(func(p point) float64 { return float64(p.InFlightServer) })},
		{"shed_limit", "the shedder's limit while engaged", "#d62728", true, func(mode string, p point) (float64, bool) {
			return float64(p.ShedLimit), mode == "protected" && p.ShedLimit > 0
		}},
	}},
	{key: "runtime", title: "the runtime's scheduling latency p99, ms (log scale); the shedder's state in the strip", log: true, series: []seriesDef{
		{"sched_p99", "scheduling latency p99", "#8c564b", false, positive(func(p point) float64 { return p.SchedP99ms })},
	}, state: func(p point) string { return p.ShedState }, stateLabel: "shedder", stateColors: shedColors, stateLegend: []string{"released", "engaged"},
		noData: "no shedder: every request is admitted"},
}

// shedColors colours the shedder's states in the strip.
var shedColors = map[string]string{"released": "#2ca02c", "engaged": "#d62728"}

var dbRows = []rowDef{
	{key: "throughput", title: "requests per second", series: []seriesDef{
		{"offered", "offered", "#7f7f7f", true, always(func(p point) float64 { return p.Offered })},
		{"sent", "sent (the rest dropped by the generator)", "#000000", false, always(func(p point) float64 { return p.Sent })},
		{"succeeded", "succeeded (200)", "#2ca02c", false, always(func(p point) float64 { return p.Succeeded })},
		{"shed", "shed (503 + Retry-After)", "#ff7f0e", false, always(func(p point) float64 { return p.Shed })},
		{"failed", "failed (timeouts, 5xx)", "#d62728", false, always(func(p point) float64 { return p.Failed })},
	}},
	{key: "latency", title: "latency of the successes, ms (log scale)", log: true, series: []seriesDef{
		{"p50", "p50", "#1f77b4", false, positive(func(p point) float64 { return p.P50ms })},
		{"p99", "p99", "#9467bd", false, positive(func(p point) float64 { return p.P99ms })},
	}},
	{key: "in_flight", title: "requests in flight", series: []seriesDef{
		{"in_flight_client", "client", "#1f77b4", false, always(func(p point) float64 { return float64(p.InFlightClient) })},
		{"in_flight_server", "server", "#17becf", false, always(func(p point) float64 { return float64(p.InFlightServer) })},
		{"db_waiting", "waiting for a db connection", "#8c564b", false, always(func(p point) float64 { return float64(p.DBWaiting) })},
		{"admission_in_flight", "entry bulkhead permits", "#bcbd22", true, protectedOnly(func(p point) float64 { return float64(p.AdmissionInFlight) })},
		{"db_in_flight", "db bulkhead permits", "#e377c2", true, protectedOnly(func(p point) float64 { return float64(p.DBInFlight) })},
	}},
	{key: "breaker", title: "database breaker: failure rate % of its window; its state in the strip", fixedMax: 100, series: []seriesDef{
		{"breaker_failure_rate", "failure rate %", "#d62728", false, protectedOnly(func(p point) float64 { return p.BreakerFailureRate })},
	}, state: func(p point) string { return p.BreakerState }, stateLabel: "breaker state", stateColors: breakerColors, stateLegend: []string{"closed", "half-open", "open"},
		noData: "no policies: every request is admitted"},
}

// breakerColors colours the breaker's states in the strip.
var breakerColors = map[string]string{"closed": "#2ca02c", "open": "#d62728", "half-open": "#ff7f0e", "forced-open": "#8c1a1a", "disabled": "#7f7f7f", "metrics-only": "#17becf"}

// phaseFill shades the phases: red (the slowdown, the overload) in red,
// the others alternately.
func phaseFill(name, red string, i int) string {
	if name == red {
		return "#fde0dd"
	}
	if i%2 == 0 {
		return "#f2f2f2"
	}
	return "#e8eef6"
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// niceCeil rounds x up to a round number (1, 1.2, 1.5, 2, 2.5, 3, 4, 5,
// 6 or 8 times a power of ten), at least 1.
func niceCeil(x float64) float64 {
	if !(x > 1) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}

// axes is one row's y range and the chart's time range.
type axes struct {
	t1     float64 // time axis: 0 to t1 seconds
	v0, v1 float64 // y axis
	log    bool
}

func (a axes) x(x0 float64, t float64) float64 { return x0 + colW*t/a.t1 }

func (a axes) y(y0 float64, v float64) float64 {
	if a.log {
		v = math.Max(v, a.v0)
		return y0 + panelH - panelH*(math.Log10(v)-math.Log10(a.v0))/(math.Log10(a.v1)-math.Log10(a.v0))
	}
	return y0 + panelH - panelH*(v-a.v0)/(a.v1-a.v0)
}

// renderSVG draws rec's runs side by side: a self-contained SVG (no script,
// no external reference).
func renderSVG(rec recording) string {
	spec := specOf(rec)
	t1 := 0.0
	for _, r := range rec.Runs {
		for _, p := range r.Points {
			t1 = math.Max(t1, p.T)
		}
		for _, s := range r.Phases {
			t1 = math.Max(t1, s.End)
		}
	}
	t1 = math.Max(5, math.Ceil(t1/5)*5)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12" data-rate="%d">`+"\n", svgW, svgH, svgW, svgH, rec.Rate)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", svgW, svgH)
	fmt.Fprintf(&b, `<text class="title" x="%d" y="24" font-size="18" font-weight="bold">%s</text>`+"\n", marginL, esc(spec.title(rec)))
	for c, mode := range []string{"unprotected", "protected"} {
		fmt.Fprintf(&b, `<text class="column" x="%d" y="52" font-size="15" font-weight="bold" text-anchor="middle">%s</text>`+"\n", marginL+c*(colW+colGap)+colW/2, mode)
	}
	for ri, row := range spec.rows {
		a := axes{t1: t1, log: row.log}
		vmax := 0.0
		for _, r := range rec.Runs {
			for _, p := range r.Points {
				for _, s := range row.series {
					if v, ok := s.get(r.Mode, p); ok && !math.IsNaN(v) && !math.IsInf(v, 0) {
						vmax = math.Max(vmax, v)
					}
				}
			}
		}
		if row.log {
			a.v0, a.v1 = 1, math.Max(100, math.Pow(10, math.Ceil(math.Log10(math.Max(vmax, 1)))))
			if vmin := logMin(rec, row); vmin < 1 {
				a.v0 = math.Pow(10, math.Floor(math.Log10(vmin)))
			}
		} else if row.fixedMax > 0 {
			a.v0, a.v1 = 0, math.Max(row.fixedMax, niceCeil(vmax))
		} else {
			a.v0, a.v1 = 0, niceCeil(vmax)
		}
		y0 := float64(headerH + ri*(panelH+rowGap))
		for c, mode := range []string{"unprotected", "protected"} {
			x0 := float64(marginL + c*(colW+colGap))
			var run *runSeries
			for i := range rec.Runs {
				if rec.Runs[i].Mode == mode {
					run = &rec.Runs[i]
				}
			}
			drawPanel(&b, row, spec.redPhase, a, mode, run, x0, y0)
		}
		// The row's legend, once for both columns.
		lx, ly := float64(marginL), y0+panelH+52
		fmt.Fprintf(&b, `<g class="legend" data-row="%s">`, row.key)
		for _, s := range row.series {
			dash := ""
			if s.dash {
				dash = ` stroke-dasharray="6 3"`
			}
			fmt.Fprintf(&b, `<g class="legend-item" data-series="%s"><line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="%s" stroke-width="2"%s/><text x="%.0f" y="%.0f">%s</text></g>`,
				s.key, lx, ly-4, lx+22, ly-4, s.color, dash, lx+27, ly, esc(s.label))
			lx += 40 + 6.5*float64(len(s.label))
		}
		if row.state != nil {
			for _, st := range row.stateLegend {
				fmt.Fprintf(&b, `<g class="legend-item" data-state="%s"><rect x="%.0f" y="%.0f" width="14" height="8" fill="%s"/><text x="%.0f" y="%.0f">%s</text></g>`,
					st, lx, ly-9, row.stateColors[st], lx+18, ly, st)
				lx += 30 + 6.5*float64(len(st))
			}
		}
		b.WriteString("</g>\n")
	}
	fmt.Fprintf(&b, `<text class="caption" x="%d" y="%d" font-size="11" fill="#555">%s</text>`+"\n", marginL, svgH-10,
		esc(fmt.Sprintf("%s · %s · %s · GOMAXPROCS %d", rec.Command, rec.GoVersion, rec.CPU, rec.GOMAXPROCS)))
	b.WriteString("</svg>\n")
	return b.String()
}

// drawPanel draws one mode's panel of one row: phases shaded, axes, the
// series as polylines (one per stretch of points that have a value).
func drawPanel(b *strings.Builder, row rowDef, red string, a axes, mode string, run *runSeries, x0, y0 float64) {
	scale := "linear"
	if a.log {
		scale = "log"
	}
	fmt.Fprintf(b, `<g class="panel" data-row="%s" data-mode="%s" data-x="%g" data-y="%g" data-w="%d" data-h="%d" data-t0="0" data-t1="%g" data-v0="%g" data-v1="%g" data-scale="%s">`+"\n",
		row.key, mode, x0, y0, colW, panelH, a.t1, a.v0, a.v1, scale)
	fmt.Fprintf(b, `<text class="panel-title" x="%g" y="%g" font-size="12" fill="#333">%s</text>`+"\n", x0, y0-6, esc(row.title))
	if run != nil {
		for i, s := range run.Phases {
			xa, xb := a.x(x0, s.Start), a.x(x0, s.End)
			fmt.Fprintf(b, `<rect class="phase" data-phase="%s" x="%.1f" y="%g" width="%.1f" height="%d" fill="%s"/>`, esc(s.Name), xa, y0, math.Max(xb-xa, 0), panelH, phaseFill(s.Name, red, i))
			fmt.Fprintf(b, `<text class="phase-label" x="%.1f" y="%g" font-size="10" fill="#666" text-anchor="middle">%s</text>`+"\n", (xa+xb)/2, y0+12, esc(s.Name))
		}
	}
	fmt.Fprintf(b, `<rect x="%g" y="%g" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", x0, y0, colW, panelH)
	// y axis: ticks and grid.
	b.WriteString(`<g class="axis" data-axis="y">`)
	var ticks []float64
	if a.log {
		// Powers of ten by their exponent: repeated products drift (the top
		// tick must be the axis' end exactly).
		for k := math.Round(math.Log10(a.v0)); k <= math.Round(math.Log10(a.v1)); k++ {
			ticks = append(ticks, math.Pow(10, k))
		}
	} else {
		for i := range 5 {
			ticks = append(ticks, a.v0+(a.v1-a.v0)*float64(i)/4)
		}
	}
	for _, v := range ticks {
		y := a.y(y0, v)
		fmt.Fprintf(b, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#ddd"/><text class="tick" x="%g" y="%.1f" font-size="10" text-anchor="end" data-value="%g">%s</text>`,
			x0, y, x0+colW, y, x0-4, y+3, v, esc(fmt.Sprintf("%g", v)))
	}
	b.WriteString("</g>\n")
	// x axis: a tick every 5 s (10 s past a minute).
	step := 5.0
	if a.t1 > 60 {
		step = 10
	}
	b.WriteString(`<g class="axis" data-axis="x">`)
	for t := 0.0; t <= a.t1+1e-9; t += step {
		x := a.x(x0, t)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#999"/><text class="tick" x="%.1f" y="%g" font-size="10" text-anchor="middle" data-value="%g">%g</text>`,
			x, y0+panelH, x, y0+panelH+4, x, y0+panelH+15, t, t)
	}
	fmt.Fprintf(b, `<text class="axis-label" x="%g" y="%g" font-size="11" text-anchor="middle">seconds since the run started</text>`, x0+colW/2, y0+panelH+30)
	b.WriteString("</g>\n")
	if row.state != nil {
		fmt.Fprintf(b, `<g class="axis-label"><text x="%g" y="%g" font-size="10" fill="#444">%s</text></g>`, x0+4, y0+28, esc(row.stateLabel))
	}
	if run == nil {
		b.WriteString("</g>\n")
		return
	}
	for _, s := range row.series {
		var seg []string
		flush := func() {
			if len(seg) > 0 {
				dash := ""
				if s.dash {
					dash = ` stroke-dasharray="6 3"`
				}
				fmt.Fprintf(b, `<polyline class="series" data-series="%s" fill="none" stroke="%s" stroke-width="1.8"%s points="%s"/>`+"\n", s.key, s.color, dash, strings.Join(seg, " "))
				seg = nil
			}
		}
		for _, p := range run.Points {
			v, ok := s.get(mode, p)
			if !ok || math.IsNaN(v) || math.IsInf(v, 0) {
				flush()
				continue
			}
			seg = append(seg, fmt.Sprintf("%.2f,%.2f", a.x(x0, p.T), a.y(y0, v)))
		}
		flush()
	}
	if row.state != nil {
		states := 0
		for _, p := range run.Points {
			st := row.state(p)
			if st == "" {
				continue
			}
			states++
			xa, xb := a.x(x0, p.T-p.Dt), a.x(x0, p.T)
			c := row.stateColors[st]
			if c == "" {
				c = "#000000"
			}
			fmt.Fprintf(b, `<rect class="state" data-state="%s" x="%.2f" y="%g" width="%.2f" height="10" fill="%s"/>`, esc(st), xa, y0+32, math.Max(xb-xa, 0.5), c)
		}
		b.WriteString("\n")
		if states == 0 {
			fmt.Fprintf(b, `<text class="no-data" x="%g" y="%g" text-anchor="middle" fill="#888">%s</text>`+"\n", x0+colW/2, y0+panelH/2, esc(row.noData))
		}
	}
	b.WriteString("</g>\n")
}

// logMin is the least positive value of row's series in rec (1 when none).
func logMin(rec recording, row rowDef) float64 {
	m := 1.0
	for _, r := range rec.Runs {
		for _, p := range r.Points {
			for _, s := range row.series {
				if v, ok := s.get(r.Mode, p); ok && v > 0 && !math.IsInf(v, 0) {
					m = math.Min(m, v)
				}
			}
		}
	}
	return m
}

var chartPage = template.Must(template.New("chart").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8"/>
<title>{{.Title}}</title>
<style>body{font:14px/1.4 system-ui,sans-serif;margin:1em 2em;color:#222;background:#fff}svg{max-width:100%;height:auto}code{font-size:13px}</style>
</head>
<body>
<h1>{{.Title}}</h1>
<p>{{.Intro}} Recorded with <code>{{.Rec.Command}}</code>, {{.Rec.GoVersion}}, {{.Rec.CPU}}, GOMAXPROCS {{.Rec.GOMAXPROCS}}. The data: {{range $i, $d := .Data}}{{if $i}}, {{end}}<a href="{{$d}}">{{$d}}</a>{{end}}.</p>
{{.SVG}}
</body>
</html>
`))

// writeHTML writes a page that embeds svg (renderSVG's output) inline and
// links to data, the recording's files (paths relative to the page).
func writeHTML(w io.Writer, rec recording, svg string, data []string) error {
	var buf bytes.Buffer
	spec := specOf(rec)
	err := chartPage.Execute(&buf, struct {
		Title, Intro string
		Data         []string
		Rec          recording
		SVG          template.HTML // renderSVG escapes every text it writes
	}{spec.title(rec), spec.intro(rec), data, rec, template.HTML(svg)})
	if err != nil {
		return err
	}
	_, err = w.Write(buf.Bytes())
	return err
}
