package rampartconfig_test

import (
	"fmt"

	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/rampartconfig"
	"github.com/rampart-go/rampart/registry"
)

func Example() {
	doc, err := rampartconfig.Load([]byte(`
defaults:
  breaker: {failureRateThreshold: 50}
breakers:
  payments: {groups: [upstream]}
pipelines:
  db:
    breaker: {failureRateThreshold: 25}
    retry: {maxAttempts: 3, baseDelay: 50ms}
    timeout: {duration: 200ms}
`), rampartconfig.YAML)
	if err != nil {
		fmt.Println(err)
		return
	}
	live, err := rampartconfig.Build(doc, rampartconfig.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer live.Close()
	reg := live.Registry()
	b, _ := registry.Lookup[*circuitbreaker.Breaker](reg, "db.breaker")
	fmt.Println("registered:", reg.Len(), "db.breaker threshold:", b.Config().FailureRateThreshold)

	// A reload: the same breaker, its threshold changed in place.
	next, _ := rampartconfig.Load([]byte(`
breakers:
  payments: {groups: [upstream]}
pipelines:
  db:
    breaker: {failureRateThreshold: 10}
    retry: {maxAttempts: 3, baseDelay: 50ms}
    timeout: {duration: 200ms}
`), rampartconfig.YAML)
	if err := live.Apply(next); err != nil {
		fmt.Println(err)
		return
	}
	same, _ := registry.Lookup[*circuitbreaker.Breaker](reg, "db.breaker")
	fmt.Println("same breaker:", same == b, "threshold:", b.Config().FailureRateThreshold, "version:", live.Version())

	// An invalid reload changes nothing and says where.
	bad, err := rampartconfig.Load([]byte(`pipelines: {db: {breaker: {failureRateThreshold: 150}}}`), rampartconfig.YAML)
	fmt.Println(bad == nil, err)
	// Output:
	// registered: 5 db.breaker threshold: 25
	// same breaker: true threshold: 10 version: 2
	// true pipelines.db.breaker.failureRateThreshold: must be a percentage in (0, 100] (0 = default 50), got 150
}
