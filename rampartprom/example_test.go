package rampartprom_test

import (
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rampart-go/rampart/rampartprom"
	"github.com/rampart-go/rampart/ratelimit"
)

// Register a collector and attach a rate limiter; its Stats are read at
// each scrape.
func ExampleNewCollector() {
	c := rampartprom.NewCollector(rampartprom.Config{})
	reg := prometheus.NewRegistry() // or prometheus.MustRegister(c)
	reg.MustRegister(c)
	limiter, _ := ratelimit.New(ratelimit.Config{Name: "login", Rate: 10, Burst: 20, CountStats: true})
	if err := c.Add("login", limiter); err != nil {
		panic(err)
	}
	limiter.Allow()

	err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP rampart_ratelimit_admitted_total Calls admitted (counted only with Config.CountStats).
# TYPE rampart_ratelimit_admitted_total counter
rampart_ratelimit_admitted_total{rampart_name="login"} 1
`), "rampart_ratelimit_admitted_total")
	fmt.Println(err)
	// Output: <nil>
}
