package ratelimit

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestKeyedFullTableNeverReturnsNever: Never means "this n can never be
// admitted"; a new key refused because the table is momentarily full (a
// racing insert took the slot a sweep had just freed) must get a finite
// wait, not Never.
func TestKeyedFullTableNeverReturnsNever(t *testing.T) {
	k, err := NewKeyed(KeyedConfig{Config: Config{Limit: 1, Period: time.Second}, MaxKeys: 1})
	if err != nil {
		t.Fatal(err)
	}
	var clock atomic.Int64
	var never atomic.Int64
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := []byte("g0-0000")
			key[1] = byte('0' + g)
			for i := range 3000 {
				// Every reading is a second after the previous one: every
				// key held is idle, so a sweep can always free its slot.
				now := clock.Add(int64(time.Second))
				key[3], key[4], key[5], key[6] = byte('0'+i/1000%10), byte('0'+i/100%10), byte('0'+i/10%10), byte('0'+i%10)
				if k.TryAcquire(string(key), now, 1) == Never {
					never.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := never.Load(); n != 0 {
		t.Fatalf("%d valid requests for a new key got Never", n)
	}
}
