package main

import (
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/rampart-go/rampart/statuspage"
)

// status serves package statuspage's page on a loopback listener of its own
// while the demo runs, read-only (no Authorize: every action is refused).
// Its instances are the current run's: the database's fault injector, and
// the guard's policies in the protected run, under the run's mode.
type status struct {
	url  string
	page *statuspage.Handler
	srv  *http.Server

	mu   sync.Mutex
	list []statuspage.Instance
}

// Range lists the current run's instances (statuspage.Source).
func (s *status) Range(f func(name string, instance any) bool) {
	s.mu.Lock()
	list := s.list
	s.mu.Unlock()
	for _, in := range list {
		if !f(in.Name, in.Value) {
			return
		}
	}
}

// startStatus listens on addr ("" serves nothing: a nil *status, on which
// every method is a no-op) and calls ready, when set, with the page's URL.
func startStatus(addr string, ready func(string)) (*status, error) {
	if addr == "" {
		return nil, nil
	}
	s := &status{}
	page, err := statuspage.New(statuspage.Config{Title: "overload demo", Source: s, Refresh: 2 * time.Second, Samples: 120})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/debug/rampart/", page)
	mux.Handle("/{$}", http.RedirectHandler("/debug/rampart/", http.StatusFound))
	s.page, s.url = page, "http://"+ln.Addr().String()+"/debug/rampart/"
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	if ready != nil {
		ready(s.url)
	}
	return s, nil
}

// show makes the page list mode's instances (mode "": none).
func (s *status) show(mode string, db *database, g *guard) {
	if s == nil {
		return
	}
	var list []statuspage.Instance
	if db != nil {
		list = append(list, statuspage.Instance{Name: mode + "/db-faults", Value: db.faults})
	}
	if g != nil {
		for _, in := range g.instances() {
			list = append(list, statuspage.Instance{Name: mode + "/" + in.Name, Value: in.Value})
		}
	}
	s.mu.Lock()
	s.list = list
	s.mu.Unlock()
}

// sample takes the page's per-second sample (the demo's progress loop
// calls it, so the charts have no gaps while nobody watches).
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
