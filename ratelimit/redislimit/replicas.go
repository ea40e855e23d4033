package redislimit

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rampart-go/rampart"
)

// ReplicasConfig configures a [Replicas]. Zero fields mean the documented
// defaults.
type ReplicasConfig struct {
	// Client is the Redis client. Required.
	Client redis.UniversalClient
	// Name is the group the replicas count themselves in (the service's
	// name, say): every replica of the group uses the same Name. Required.
	Name string
	// Prefix starts the group's Redis key, Prefix + "{" + Name + "}".
	// Default "rampart:replicas:".
	Prefix string
	// ID is this replica's member in the group. Default a random token
	// (crypto/rand.Text); two live replicas must never share one.
	ID string
	// TTL is how long a heartbeat counts: a replica that stops
	// heartbeating (killed, partitioned) leaves the count within TTL.
	// Default 3 s; it must be longer than Every.
	TTL time.Duration
	// Every is the heartbeat period. Default 1 s.
	Every time.Duration
	// Timeout bounds every heartbeat, whatever the client's own timeouts.
	// Default 100 ms.
	Timeout time.Duration
	// OnRedisError, if set, is called with every failed heartbeat's error:
	// the first heartbeat's on Start's goroutine, the others' on the
	// heartbeat goroutine (a panic in it is recovered and counted; a
	// runtime.Goexit there ends that goroutine and another takes over).
	OnRedisError func(err error)
}

// ReplicasStats is a snapshot of a [Replicas]' counters.
type ReplicasStats struct {
	Count          int    // live replicas in the last heartbeat's reply (0 before the first)
	Heartbeats     uint64 // heartbeats Redis answered
	RedisErrors    uint64 // heartbeats that failed (timeouts, connection errors)
	ListenerPanics uint64 // listener panics recovered
}

// Replicas is a live count of the processes of one group: each process
// heartbeats its ID into a Redis sorted set scored by expiry (Redis' TIME
// plus TTL) and reads back how many members have not expired. Build it
// with [NewReplicas], call [Replicas.Start] once and [Replicas.Close] at
// shutdown; [Replicas.Count] is the last heartbeat's answer, read with one
// atomic load and no round trip.
//
// Give it to [Config].LiveReplicas and [SemaphoreConfig].LiveReplicas:
// their FailLocal fallbacks then take this replica's share as the limit
// divided by Count instead of by the static Replicas. While Redis is
// unreachable heartbeats fail and Count keeps the last answer: the count
// from just before the outage, which is what the fallback needs.
//
// A Replicas is safe for concurrent use.
type Replicas struct {
	cfg        ReplicasConfig
	key        string
	ttlArg     string
	errTimeout error

	count                                   atomic.Int64
	heartbeats, redisErrors, listenerPanics atomic.Uint64

	mu      sync.Mutex // guards started, closed
	started bool
	closed  bool
	stop    chan struct{}
	done    chan struct{}
}

// ErrClosed is returned by a [Semaphore]'s Acquire, AcquireWait, Do and
// Call after its Close, and by a [Replicas]' Start after its Close.
var ErrClosed = errors.New("redislimit: closed")

// errStarted is Start's error on a Replicas already started.
var errStarted = errors.New("redislimit: replicas already started")

// NewReplicas validates cfg and returns a Replicas that has not started
// heartbeating: call [Replicas.Start].
func NewReplicas(cfg ReplicasConfig) (*Replicas, error) {
	if cfg.Client == nil {
		return nil, rampart.NewConfigError("redislimit", "ReplicasConfig.Client", "is required")
	}
	if cfg.Name == "" {
		return nil, rampart.NewConfigError("redislimit", "ReplicasConfig.Name", "is required")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "rampart:replicas:"
	}
	if cfg.ID == "" {
		cfg.ID = rand.Text()
	}
	if cfg.TTL == 0 {
		cfg.TTL = 3 * time.Second
	}
	if cfg.Every == 0 {
		cfg.Every = time.Second
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 100 * time.Millisecond
	}
	switch {
	case cfg.Every < 0:
		return nil, rampart.NewConfigError("redislimit", "ReplicasConfig.Every", "must be positive, got %v", cfg.Every)
	case cfg.TTL < time.Millisecond:
		return nil, rampart.NewConfigError("redislimit", "ReplicasConfig.TTL", "must be at least 1ms, got %v", cfg.TTL)
	case cfg.TTL <= cfg.Every:
		return nil, rampart.NewConfigError("redislimit", "ReplicasConfig.TTL",
			"must be longer than the heartbeat period Every (%v), got %v", cfg.Every, cfg.TTL)
	case cfg.Timeout < 0:
		return nil, rampart.NewConfigError("redislimit", "ReplicasConfig.Timeout", "must be positive, got %v", cfg.Timeout)
	}
	return &Replicas{
		cfg: cfg, key: cfg.Prefix + "{" + cfg.Name + "}",
		ttlArg:     strconv.FormatInt(cfg.TTL.Microseconds(), 10),
		errTimeout: fmt.Errorf("redislimit: no heartbeat reply from redis within %v: %w", cfg.Timeout, context.DeadlineExceeded),
		stop:       make(chan struct{}), done: make(chan struct{}),
	}, nil
}

// Start sends the first heartbeat, within ctx and Timeout, and starts the
// goroutine that sends one every Every until [Replicas.Close]. It returns
// the first heartbeat's error; the heartbeats go on either way, so a
// replica started while Redis is down joins the count when Redis answers.
// Start after Close returns ErrClosed, a second Start an error; neither
// does anything.
func (r *Replicas) Start(ctx context.Context) error {
	r.mu.Lock()
	if r.closed || r.started {
		err := errStarted
		if r.closed {
			err = ErrClosed
		}
		r.mu.Unlock()
		return err
	}
	r.started = true
	r.mu.Unlock()
	// Whatever ends the first heartbeat (a client hook's panic, re-raised
	// to the caller, or an OnRedisError that calls runtime.Goexit), the
	// loop that Close waits for starts.
	defer func() { go r.loop() }()
	return r.heartbeat(ctx)
}

// loop is the heartbeat goroutine. An OnRedisError that ends it with
// runtime.Goexit (notifyListener recovers panics only) starts its
// successor: the replica heartbeats on, and Close still finds r.done
// closed by the last one.
func (r *Replicas) loop() {
	ended := false // by Close: anything else is a listener's Goexit
	defer func() {
		if !ended {
			go r.loop()
			return
		}
		close(r.done)
	}()
	t := time.NewTicker(r.cfg.Every)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			ended = true
			return
		case <-t.C:
			r.heartbeatInBackground()
		}
	}
}

// heartbeatInBackground is a heartbeat of the loop, where a panic of the
// client (a hook, say) that within re-raises reaches no caller: it is a
// failed heartbeat, counted in RedisErrors and passed to OnRedisError, not
// a crash of the process.
func (r *Replicas) heartbeatInBackground() {
	defer func() {
		if p := recover(); p != nil {
			r.redisErrors.Add(1)
			if f := r.cfg.OnRedisError; f != nil {
				notifyListener(&r.listenerPanics, f, fmt.Errorf("redislimit: redis client panicked: %v", p))
			}
		}
	}()
	_ = r.heartbeat(context.Background()) // counted, and passed to OnRedisError
}

// heartbeat renews this replica's member and stores the live count.
func (r *Replicas) heartbeat(ctx context.Context) error {
	ctx, cancel := context.WithTimeoutCause(ctx, r.cfg.Timeout, r.errTimeout)
	defer cancel()
	n, err := within(ctx, func(ctx context.Context) (int64, error) {
		return heartbeatScript.Run(ctx, r.cfg.Client, []string{r.key}, r.cfg.ID, r.ttlArg).Int64()
	})
	if err != nil {
		r.redisErrors.Add(1)
		if f := r.cfg.OnRedisError; f != nil {
			notifyListener(&r.listenerPanics, f, err)
		}
		return err
	}
	r.heartbeats.Add(1)
	r.count.Store(n)
	return nil
}

// Count returns the number of live replicas in the group, this one
// included, as the last heartbeat Redis answered counted them: one atomic
// load, no round trip. It is 0 until the first heartbeat is answered.
func (r *Replicas) Count() int { return int(r.count.Load()) }

// ID returns this replica's member in the group.
func (r *Replicas) ID() string { return r.cfg.ID }

// Stats returns a snapshot of the counters.
func (r *Replicas) Stats() ReplicasStats {
	return ReplicasStats{
		Count:          r.Count(),
		Heartbeats:     r.heartbeats.Load(),
		RedisErrors:    r.redisErrors.Load(),
		ListenerPanics: r.listenerPanics.Load(),
	}
}

// Close stops the heartbeats and removes this replica from the group (one
// round trip within Timeout; if it fails, the member expires within TTL),
// so the others count one fewer at their next heartbeat. It returns that
// round trip's error. Close is idempotent.
func (r *Replicas) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	started := r.started
	r.mu.Unlock()
	if !started {
		return nil
	}
	close(r.stop)
	<-r.done
	ctx, cancel := context.WithTimeoutCause(context.Background(), r.cfg.Timeout, r.errTimeout)
	defer cancel()
	_, err := within(ctx, func(ctx context.Context) (int64, error) {
		return r.cfg.Client.ZRem(ctx, r.key, r.cfg.ID).Result()
	})
	return err
}

// share is the replica count a FailLocal fallback divides its limit by:
// the live count when live is set and has answered, else the static count.
func share(live *Replicas, static int) int {
	if live != nil {
		if n := live.Count(); n > 0 {
			return n
		}
	}
	return static
}
