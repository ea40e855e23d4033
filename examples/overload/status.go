package main

import (
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rampart-go/rampart/rampartprom"
	"github.com/rampart-go/rampart/registry"
	"github.com/rampart-go/rampart/statuspage"
)

// status serves, on a loopback listener of its own while the demo runs,
// what an operator of the service would look at: package statuspage's
// page (read-only: no Authorize, every action is refused) and /metrics
// for Prometheus (rampartprom's collector, with the Go runtime's
// scheduler metrics and the process's). Both read the demo's registry,
// which holds the current run's instances.
type status struct {
	url        string // the status page
	metricsURL string // /metrics
	page       *statuspage.Handler
	srv        *http.Server
}

// startStatus listens on addr ("" serves nothing: a nil *status, on which
// every method is a no-op) and calls ready, when set, with the status
// page's and /metrics' URLs.
func startStatus(addr string, reg *registry.Registry, ready func(page, metrics string)) (*status, error) {
	if addr == "" {
		return nil, nil
	}
	s := &status{}
	page, err := statuspage.New(statuspage.Config{Title: "overload demo", Source: reg, Refresh: 2 * time.Second, Samples: 120})
	if err != nil {
		return nil, err
	}
	c := rampartprom.NewCollector(rampartprom.Config{})
	c.AddSource(reg) // ranged at every scrape: each run's instances as they come and go
	prom := prometheus.NewRegistry()
	prom.MustRegister(c,
		// go_sched_latencies_seconds and go_sched_goroutines_*: the
		// runtime's view of the CPU scenario's overload (what package
		// shed reads), beside the process's CPU seconds.
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsScheduler)),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/debug/rampart/", page)
	mux.Handle("/metrics", promhttp.HandlerFor(prom, promhttp.HandlerOpts{}))
	mux.Handle("/{$}", http.RedirectHandler("/debug/rampart/", http.StatusFound))
	base := "http://" + ln.Addr().String()
	s.page, s.url, s.metricsURL = page, base+"/debug/rampart/", base+"/metrics"
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	if ready != nil {
		ready(s.url, s.metricsURL)
	}
	return s, nil
}

// sample takes the page's sample now (the demo's progress loop calls it
// once a second, so the charts have no gaps while nobody watches, and
// each run calls it once its instances are gone, so that the next run's
// instances of the same names start new charts).
func (s *status) sample() {
	if s != nil {
		s.page.Sample()
	}
}

// close stops the server.
func (s *status) close() {
	if s != nil {
		_ = s.srv.Close()
	}
}

// clearRegistry removes every instance of reg (a run's instances, at its
// end: the next run registers its own under the same names). The registry
// does not own them: closing what needs it is the run's business.
func clearRegistry(reg *registry.Registry) {
	for _, n := range instanceNames(reg) {
		reg.Remove(n)
	}
}

// instanceNames lists reg's names in order.
func instanceNames(reg *registry.Registry) []string {
	var names []string
	reg.Range(func(name string, _ any) bool {
		names = append(names, name)
		return true
	})
	return names
}
