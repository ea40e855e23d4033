// Command e2e is the end-to-end test's helper for rampartprom (see
// ../../scripts/test-e2e.sh). It has two modes.
//
//	e2e serve -addr-file F
//
// serves a rampartprom.Collector of a circuit breaker ("e2e-breaker") and
// a rate limiter ("e2e-limiter") on 127.0.0.1 at a free port, written to
// F, at /metrics; GET /drive trips the breaker (failures, then rejected
// calls) and sends the limiter 50 calls at once (burst 5: 45 rejected).
//
//	e2e query -prom URL -expr EXPR -min V -timeout D
//
// polls Prometheus's /api/v1/query for EXPR until one of its samples is at
// least V, or fails after D.
//
//	e2e freeport
//
// prints a TCP port free on 127.0.0.1 (for Prometheus's listen address).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/rampartprom"
	"github.com/rampart-go/rampart/ratelimit"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("e2e: ")
	if len(os.Args) < 2 {
		log.Fatal("usage: e2e serve|query ...")
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "query":
		err = query(os.Args[2:])
	case "freeport":
		err = freePort()
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		log.Fatal(err)
	}
}

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	addrFile := fs.String("addr-file", "", "file to write the listening address to")
	_ = fs.Parse(args)

	b, err := circuitbreaker.New(circuitbreaker.Config{Name: "e2e-breaker", Mode: circuitbreaker.Consecutive,
		ConsecutiveFailures: 5, OpenDuration: time.Hour})
	if err != nil {
		return err
	}
	l, err := ratelimit.New(ratelimit.Config{Name: "e2e-limiter", Rate: 1, Burst: 5, CountStats: true})
	if err != nil {
		return err
	}
	c := rampartprom.NewCollector(rampartprom.Config{})
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	if err := c.Add("e2e-breaker", b); err != nil {
		return err
	}
	if err := c.Add("e2e-limiter", l); err != nil {
		return err
	}

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	mux.HandleFunc("/drive", func(w http.ResponseWriter, r *http.Request) {
		failing := errors.New("dependency down")
		var rejected int
		for range 25 {
			err := b.Do(r.Context(), func(context.Context) error { return failing })
			if errors.Is(err, rampart.ErrRejected) {
				rejected++
			}
		}
		var limited int
		for range 50 {
			if !l.Allow() {
				limited++
			}
		}
		fmt.Fprintf(w, "breaker %s, %d rejected; limiter %d rejected\n", b.Stats().State, rejected, limited)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	if *addrFile != "" {
		if err := os.WriteFile(*addrFile+".tmp", []byte(ln.Addr().String()), 0o644); err != nil {
			return err
		}
		if err := os.Rename(*addrFile+".tmp", *addrFile); err != nil {
			return err
		}
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		_ = srv.Shutdown(context.Background())
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func query(args []string) error {
	fs := flag.NewFlagSet("query", flag.ExitOnError)
	prom := fs.String("prom", "", "Prometheus base URL")
	expr := fs.String("expr", "", "PromQL expression")
	minV := fs.Float64("min", 1, "the least value a sample must reach")
	timeout := fs.Duration("timeout", 60*time.Second, "how long to poll")
	_ = fs.Parse(args)

	deadline := time.Now().Add(*timeout)
	var last string
	for {
		v, err := instant(*prom, *expr)
		switch {
		case err != nil:
			last = err.Error()
		case len(v) == 0:
			last = "no samples"
		default:
			for _, x := range v {
				if x >= *minV {
					fmt.Printf("%s = %v (at least %v)\n", *expr, x, *minV)
					return nil
				}
			}
			last = fmt.Sprintf("samples %v", v)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not reach %v within %v: %s", *expr, *minV, *timeout, last)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// instant runs an instant query and returns its samples' values.
func instant(base, expr string) ([]float64, error) {
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, err
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("query failed: %s", body.Error)
	}
	var out []float64
	for _, r := range body.Data.Result {
		s, _ := r.Value[1].(string)
		x, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, nil
}

// freePort prints a port that was free on 127.0.0.1 a moment ago.
func freePort() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	fmt.Println(ln.Addr().(*net.TCPAddr).Port)
	return nil
}
