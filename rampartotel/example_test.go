package rampartotel_test

import (
	"context"
	"fmt"

	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/rampartotel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Attach a breaker to a Meter; its Stats are read at each collection.
func ExampleNew() {
	reader := sdkmetric.NewManualReader() // in production, a periodic reader and an exporter
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	m, err := rampartotel.New(provider.Meter("github.com/me/service"), rampartotel.Config{})
	if err != nil {
		panic(err)
	}
	breaker, _ := circuitbreaker.New(circuitbreaker.Config{Name: "payments"})
	if err := m.Add("payments", breaker); err != nil {
		panic(err)
	}

	var rm metricdata.ResourceMetrics
	_ = reader.Collect(context.Background(), &rm)
	for _, metric := range rm.ScopeMetrics[0].Metrics {
		if metric.Name == "rampart.circuitbreaker.state" {
			for _, dp := range metric.Data.(metricdata.Gauge[float64]).DataPoints {
				if state, _ := dp.Attributes.Value("rampart.state"); dp.Value == 1 {
					fmt.Println("payments is", state.AsString())
				}
			}
		}
	}
	// Output: payments is closed
}

// Run calls through a pipeline with rampartotel.Do: a rejection or a
// timeout becomes an event on the caller's span.
func ExampleDo() {
	breaker, _ := circuitbreaker.New(circuitbreaker.Config{Name: "payments"})
	p, _ := pipeline.New(pipeline.Config{Breaker: breaker})
	ctx := context.Background() // a context that carries the caller's span
	err := rampartotel.Do(ctx, p, func(ctx context.Context) error { return nil })
	fmt.Println(err)
	// Output: <nil>
}
