package main

import (
	"context"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// phase is one stretch of the run at a constant offered rate.
type phase struct {
	name     string
	duration time.Duration
	slowdown float64 // database visit factor during the phase (the database scenario)
	rate     int     // offered req/s
	ramp     bool    // the offered rate rises from a tenth of rate to rate over the phase
}

// phaseStats counts what the requests sent during one phase became.
type phaseStats struct {
	phase   phase
	offered int64 // iterations scheduled
	sent    atomic.Int64
	ok      atomic.Int64
	shed    atomic.Int64 // 503 with Retry-After: a fast, deliberate rejection
	failed  atomic.Int64 // anything else: 5xx without Retry-After, timeouts, connection errors
	errs    atomic.Int64 // the part of failed that got no response (client timeout, connection error)
	gw      atomic.Int64 // the part of failed answered 504 (the server's deadline passed)
	dropped atomic.Int64 // iterations not sent: no free VU, or the generator was too late
	// okDuring counts the successes that completed while this phase was
	// being offered, whichever phase sent them: the phase's goodput (ok
	// counts the successes of the requests this phase sent, whenever
	// they completed).
	okDuring atomic.Int64
	maxLag   atomic.Int64 // worst lateness of the generator (ns)

	index int // position in the run, sent to the server in the X-Phase header

	mu     sync.Mutex
	lat    []time.Duration // latency of successes, as the client saw it
	srvLat []time.Duration // time the server spent on them
}

func (p *phaseStats) addServerLatency(d time.Duration) {
	p.mu.Lock()
	p.srvLat = append(p.srvLat, d)
	p.mu.Unlock()
}

// serverP99 returns the p99 of the time the server spent on successes.
func (p *phaseStats) serverP99() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.srvLat) == 0 {
		return 0
	}
	slices.Sort(p.srvLat)
	return p.srvLat[min(len(p.srvLat)-1, int(0.99*float64(len(p.srvLat))))]
}

func (p *phaseStats) addLatency(d time.Duration) {
	p.mu.Lock()
	p.lat = append(p.lat, d)
	p.mu.Unlock()
}

// percentiles returns p50, p99 and max of the successes' latencies.
func (p *phaseStats) percentiles() (p50, p99, max time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.lat) == 0 {
		return 0, 0, 0
	}
	slices.Sort(p.lat)
	at := func(q float64) time.Duration { return p.lat[min(len(p.lat)-1, int(q*float64(len(p.lat))))] }
	return at(0.50), at(0.99), p.lat[len(p.lat)-1]
}

// generator is an open-model load generator, like k6's
// constant-arrival-rate executor: it starts iterations (one HTTP request
// each) at the offered rate whatever the responses do. An iteration that
// finds all maxVUs virtual users busy, or that the generator could only
// start more than maxLag late (its own CPU starved), is dropped and counted,
// never sent late in a burst.
type generator struct {
	client   *http.Client
	url      string
	vus      chan struct{}
	maxLag   time.Duration
	writes   float64
	inFlight atomic.Int64
	wg       sync.WaitGroup
	offering atomic.Pointer[phaseStats] // the phase being offered; nil once the phases are over
}

func newGenerator(url string, o options) *generator {
	tr := &http.Transport{
		MaxIdleConns:        o.maxVUs,
		MaxIdleConnsPerHost: o.maxVUs,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	return &generator{
		client: &http.Client{
			Transport: tr,
			Timeout:   o.clientTimeout,
			// Redirects off: one HTTP request per iteration.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		url:    url,
		vus:    make(chan struct{}, o.maxVUs),
		maxLag: o.maxLag,
		writes: o.writeRate,
	}
}

// schedule maps the iteration number to the time it is due after the start
// of a phase of length T offering rate req/s: constant, or (ramp) rising
// linearly from a tenth of rate to rate, as a warm-up that does not open
// every connection at once.
type schedule struct {
	rate float64 // req/s at full rate
	t    float64 // phase length, s
	ramp bool
}

// scheduleOf is the schedule of phase p.
func scheduleOf(p *phaseStats) schedule {
	return schedule{rate: float64(p.phase.rate), t: p.phase.duration.Seconds(), ramp: p.phase.ramp}
}

// total is the number of iterations of the whole phase.
func (s schedule) total() int64 { return s.count(s.t) - 1 }

// dueBy is the number of iterations due by elapsed seconds e, any e.
func (s schedule) dueBy(e float64) int64 {
	if e < 0 {
		return 0
	}
	return min(s.count(min(e, s.t)), s.total())
}

// count is the number of iterations due by elapsed seconds e (e ≤ t).
func (s schedule) count(e float64) int64 {
	if !s.ramp {
		return int64(e*s.rate) + 1
	}
	// rate(e) = rate × (0.1 + 0.9 e/t); its integral:
	return int64(s.rate*(0.1*e+0.45*e*e/s.t)) + 1
}

// due is when iteration i (0-based) is due, in seconds after the start.
func (s schedule) due(i int64) float64 {
	n := float64(i)
	if !s.ramp {
		return n / s.rate
	}
	a, b := 0.45*s.rate/s.t, 0.1*s.rate
	return (-b + math.Sqrt(b*b+4*a*n)) / (2 * a)
}

// run offers the phase's rate (ramping up when the phase says so) for
// p.phase.duration, recording into p. It returns when the phase's time is
// over; requests still in flight keep recording into p.
func (g *generator) run(ctx context.Context, p *phaseStats) {
	g.offering.Store(p)
	sc := scheduleOf(p)
	start := time.Now()
	end := start.Add(p.phase.duration)
	p.offered = sc.total()
	seconds := func(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
	var issued int64
	for issued < p.offered {
		now := time.Now()
		// Start every iteration that is due; drop those far too late.
		due := min(sc.count(now.Sub(start).Seconds()), p.offered)
		for ; issued < due; issued++ {
			lag := now.Sub(start.Add(seconds(sc.due(issued))))
			if lag > time.Duration(p.maxLag.Load()) {
				p.maxLag.Store(int64(lag))
			}
			if lag > g.maxLag {
				p.dropped.Add(1)
				continue
			}
			select {
			case g.vus <- struct{}{}:
				g.wg.Add(1)
				go g.iteration(p)
			default:
				p.dropped.Add(1) // all VUs busy
			}
		}
		if ctx.Err() != nil || !now.Before(end) {
			break
		}
		// Sleep to the next due iteration (the Go timer wakes in batches
		// of about 1 ms at these rates).
		if d := time.Until(start.Add(seconds(sc.due(issued)))); d > 0 {
			time.Sleep(d)
		}
	}
	p.dropped.Add(p.offered - issued) // not reached before the end of the phase
}

// phaseHeader holds the X-Phase header values, preallocated.
var phaseHeader = [][]string{{"0"}, {"1"}, {"2"}, {"3"}, {"4"}, {"5"}, {"6"}, {"7"}}

// iteration sends one request and classifies its outcome.
func (g *generator) iteration(p *phaseStats) {
	defer g.wg.Done()
	defer func() { <-g.vus }()
	g.inFlight.Add(1)
	defer g.inFlight.Add(-1)
	method := http.MethodGet
	if rand.Float64() < g.writes {
		method = http.MethodPost
	}
	req, err := http.NewRequest(method, g.url, nil)
	if err != nil {
		p.failed.Add(1)
		return
	}
	req.Header["X-Phase"] = phaseHeader[p.index]
	p.sent.Add(1)
	start := time.Now()
	resp, err := g.client.Do(req)
	if err != nil {
		p.errs.Add(1)
		p.failed.Add(1)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	d := time.Since(start)
	switch {
	case resp.StatusCode == http.StatusOK:
		p.ok.Add(1)
		p.addLatency(d)
		if now := g.offering.Load(); now != nil {
			now.okDuring.Add(1)
		}
	case resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "":
		p.shed.Add(1)
	case resp.StatusCode == http.StatusGatewayTimeout:
		p.gw.Add(1)
		p.failed.Add(1)
	default:
		p.failed.Add(1)
	}
}

// phasesOver marks the end of the last phase: the successes that come
// after it count in no phase's goodput.
func (g *generator) phasesOver() { g.offering.Store(nil) }

// wait waits for every iteration started so far to end.
func (g *generator) wait() { g.wg.Wait() }

// close releases the client's idle connections.
func (g *generator) close() { g.client.CloseIdleConnections() }
