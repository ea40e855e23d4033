package bulkhead_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/bulkhead"
)

// At most two calls to the database at once; a third is refused at once.
func Example() {
	db, err := bulkhead.New(bulkhead.Config{Max: 2, Name: "db"})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()

	// The primitive form, for hot paths: no closure, no allocation.
	if db.Acquire() == nil {
		// ... query ...
		db.Release()
	}

	// The convenient form: Release is guaranteed, panics included.
	rows, err := bulkhead.Call(ctx, db, func(ctx context.Context) (int, error) { return 42, nil })
	fmt.Println(rows, err)

	// Full: hold both permits, then try again.
	db.Acquire()
	db.Acquire()
	err = db.Do(ctx, func(ctx context.Context) error { return nil })
	fmt.Println(err, errors.Is(err, bulkhead.ErrFull), errors.Is(err, rampart.ErrRejected))
	db.Release()
	db.Release()
	fmt.Println(db.Stats().InFlight, db.Stats().Rejected)
	// Output:
	// 42 <nil>
	// bulkhead "db": full true true
	// 0 1
}
