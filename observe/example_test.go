package observe_test

import (
	"fmt"

	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/observe"
)

// printer is an Emitter that prints the rejections of each breaker and
// the instances skipped.
type printer struct{}

func (printer) Begin() {}

func (printer) Instance(name string, t *observe.Type, v []float64) {
	for i, m := range t.Metrics {
		if m.Name == "rampart.circuitbreaker.rejected" {
			fmt.Printf("%s{%s=%q} %s %v\n", observe.PromName(&t.Metrics[i]), observe.PromLabel(observe.AttrName), name, m.Kind, v[i])
		}
	}
}

func (printer) Skipped(counts *[observe.NumSkipReasons]int) {
	fmt.Println("skipped, unknown type:", counts[observe.SkipUnknownType])
}

func Example() {
	cb, err := circuitbreaker.New(circuitbreaker.Config{Name: "payments"})
	if err != nil {
		panic(err)
	}
	s := observe.NewSet(nil)
	if err := s.Add("payments", cb); err != nil {
		panic(err)
	}
	s.Collect(printer{})
	// Output:
	// rampart_circuitbreaker_rejected_total{rampart_name="payments"} counter 0
	// skipped, unknown type: 0
}
