package ratelimit_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/ratelimit"
)

// Three requests per second with bursts of two, on a manual clock.
func Example() {
	clock := rampart.NewManualTicker(0)
	l, err := ratelimit.New(ratelimit.Config{Name: "api", Limit: 3, Period: time.Second, Burst: 2, Ticker: clock})
	if err != nil {
		panic(err)
	}
	for range 3 {
		fmt.Println(l.Allow())
	}
	// A rejection says how long until the next permit.
	wait := l.AdmitN(clock.Now(), 1)
	fmt.Println(wait)
	clock.Advance(wait)
	fmt.Println(l.Allow())

	if !l.AllowN(clock.Now(), 1) {
		err = l.RejectedError()
	}
	fmt.Println(err, errors.Is(err, ratelimit.ErrLimited), errors.Is(err, rampart.ErrRejected))
	// Output:
	// true
	// true
	// false
	// 333.333334ms
	// true
	// ratelimit "api": rate limited true true
}

// One limit per client; a client's burst does not affect the others.
func ExampleKeyed() {
	clock := rampart.NewManualTicker(0)
	k, err := ratelimit.NewKeyed(ratelimit.KeyedConfig{
		Config:  ratelimit.Config{Rate: 1, Burst: 1, Ticker: clock},
		MaxKeys: 10000,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(k.Allow("alice"), k.Allow("alice"), k.Allow("bob"))
	// Output: true false true
}
