// Command browsercheck serves a status page for scripts/browser-check.sh
// and checks what a headless browser made of it.
//
//	browsercheck serve -ready FILE   serve a page of one instance of each kind, with a
//	                                 minute of recorded samples, on 127.0.0.1 (a free
//	                                 port, written to FILE as its URL) until SIGINT/SIGTERM
//	browsercheck png FILE            fail unless FILE is a PNG of at least 200×200 pixels
//	                                 that is not one colour (at least 1 % of its pixels
//	                                 differ from the most common colour)
//	browsercheck dom FILE SUBSTR:N…  fail unless FILE (a --dump-dom output) holds each
//	                                 SUBSTR at least N times
package main

import (
	"context"
	"errors"
	"fmt"
	"image"
	"image/png"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/adaptive"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/chaos"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/ratelimit"
	"github.com/rampart-go/rampart/retry"
	"github.com/rampart-go/rampart/statuspage"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: browsercheck serve -ready FILE | png FILE | dom FILE SUBSTR:N...")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		if len(os.Args) != 4 || os.Args[2] != "-ready" {
			err = errors.New("usage: browsercheck serve -ready FILE")
			break
		}
		err = serve(os.Args[3])
	case "png":
		err = checkPNG(os.Args[2])
	case "dom":
		err = checkDOM(os.Args[2], os.Args[3:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "browsercheck:", err)
		os.Exit(1)
	}
}

// serve builds a breaker (counting its successes), a bulkhead, a limiter,
// an adaptive limiter, a retry budget, a chaos injector, and a counting
// pipeline over a bulkhead of 2 with a fallback for its rejections, on a
// manual clock, runs a minute of traffic through them one sample a second
// (the breaker trips and recovers; the pipeline is offered 1 to 4
// concurrent calls), and serves their page, read-only, until a signal.
func serve(ready string) error {
	tk := rampart.NewManualTicker(1_000_000_000)
	br, err := circuitbreaker.New(circuitbreaker.Config{Name: "db", Ticker: tk, WindowSize: 20, MinimumCalls: 10, FailureRateThreshold: 50, OpenDuration: 5 * time.Second, CountStats: true})
	if err != nil {
		return err
	}
	gate, err := bulkhead.New(bulkhead.Config{Name: "checkout", Max: 2})
	if err != nil {
		return err
	}
	pl, err := pipeline.New(pipeline.Config{Name: "checkout", Ticker: tk, Bulkhead: gate, CountStats: true})
	if err != nil {
		return err
	}
	fb, err := pipeline.NewDoFallback(pipeline.DoFallbackConfig{Pipeline: pl, When: pipeline.Rejections,
		Func: func(context.Context, pipeline.Outcome) error { return nil }})
	if err != nil {
		return err
	}
	bh, err := bulkhead.New(bulkhead.Config{Name: "api", Max: 32})
	if err != nil {
		return err
	}
	rl, err := ratelimit.New(ratelimit.Config{Name: "ingress", Rate: 5, Burst: 20, Ticker: tk})
	if err != nil {
		return err
	}
	al, err := adaptive.New(adaptive.Config{Name: "backend", Ticker: tk, InitialLimit: 20})
	if err != nil {
		return err
	}
	tb, err := retry.NewTokenBucket(retry.TokenBucketConfig{MaxTokens: 10, TokenRatio: 0.1})
	if err != nil {
		return err
	}
	inj, err := chaos.New(chaos.Config{ErrorRate: 0.2, Error: errors.New("injected"), Seed: 7})
	if err != nil {
		return err
	}
	page, err := statuspage.New(statuspage.Config{Title: "browser check", Ticker: tk, Samples: 60, Instances: []statuspage.Instance{
		{Name: "api", Value: bh}, {Name: "backend", Value: al}, {Name: "db", Value: br},
		{Name: "db-budget", Value: tb}, {Name: "faults", Value: inj}, {Name: "ingress", Value: rl},
		{Name: "checkout", Value: pl}, {Name: "checkout-fallback", Value: fb},
	}})
	if err != nil {
		return err
	}
	for s := range 60 {
		fail := s >= 20 && s < 30 // the dependency fails for ten seconds
		for range 10 {
			p, err := br.Acquire()
			if err != nil {
				continue
			}
			r := rampart.Success
			if fail {
				r = rampart.Failure
				tb.OnFailure(tk.Now())
			} else {
				tb.OnSuccess(tk.Now())
			}
			br.Release(p, r)
			_ = inj.Do(context.Background(), func(context.Context) error { return nil })
		}
		for range s % 7 {
			rl.Allow()
		}
		if s%10 < 5 {
			_ = bh.Acquire()
		} else if bh.Stats().InFlight > 0 {
			bh.Release()
		}
		// The pipeline: s%4 calls held in its bulkhead of 2 while one more
		// is offered, through the fallback (answered when rejected).
		held := 0
		for range s % 4 {
			if gate.Acquire() == nil {
				held++
			}
		}
		_ = fb.Do(context.Background(), func(context.Context) error { return nil })
		_ = pl.Do(context.Background(), func(context.Context) error { return nil })
		for range held {
			gate.Release()
		}
		page.Sample()
		tk.Advance(time.Second)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/debug/rampart/", page)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	if err := os.WriteFile(ready, []byte("http://"+ln.Addr().String()+"/debug/rampart/\n"), 0o644); err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	select {
	case <-sig:
	case err := <-errc:
		return err
	}
	return srv.Close()
}

// checkPNG decodes a screenshot and refuses a blank one.
func checkPNG(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	b := img.Bounds()
	if b.Dx() < 200 || b.Dy() < 200 {
		return fmt.Errorf("%s: %d×%d pixels, want at least 200×200", path, b.Dx(), b.Dy())
	}
	counts := map[[4]uint32]int{}
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, a := img.At(x, y).RGBA()
			counts[[4]uint32{r >> 8, g >> 8, bl >> 8, a >> 8}]++
		}
	}
	most := 0
	for _, n := range counts {
		most = max(most, n)
	}
	total := b.Dx() * b.Dy()
	other := total - most
	fmt.Printf("%s: %d×%d, %d colours, %.1f %% of the pixels not the background\n", path, b.Dx(), b.Dy(), len(counts), 100*float64(other)/float64(total))
	if len(counts) < 3 || other*100 < total {
		return fmt.Errorf("%s looks blank: %d colours, %d of %d pixels off the most common one", path, len(counts), other, total)
	}
	return nil
}

var _ image.Image // image/png registers into package image

// checkDOM counts substrings of a dumped DOM.
func checkDOM(path string, wants []string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dom := string(b)
	var errs []error
	for _, w := range wants {
		i := strings.LastIndexByte(w, ':')
		if i < 0 {
			return fmt.Errorf("%q: want SUBSTR:N", w)
		}
		n, err := strconv.Atoi(w[i+1:])
		if err != nil {
			return fmt.Errorf("%q: %w", w, err)
		}
		got := strings.Count(dom, w[:i])
		fmt.Printf("%s: %d × %s (want at least %d)\n", path, got, w[:i], n)
		if got < n {
			errs = append(errs, fmt.Errorf("%s: %d × %q, want at least %d", path, got, w[:i], n))
		}
	}
	return errors.Join(errs...)
}
