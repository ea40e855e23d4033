package rampartconfig

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/ratelimit"
)

// writeAtomically replaces the file at path as editors do: a temporary
// file renamed onto it.
func writeAtomically(t *testing.T, path string, data []byte) string {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// version is the i-th document of the reload loop, and whether it is
// valid: one in five is invalid (a value out of range, a fixed field
// changed, a syntax error, an unknown field, in turn).
func version(i int) (doc string, valid bool) {
	valid = i%5 != 4
	threshold, maxc, rate := 1+i%99, 1+i%50, 100+i
	doc = fmt.Sprintf("# version %d\nbreakers: {b: {windowSize: 10, minimumCalls: 10, failureRateThreshold: %d}}\nbulkheads: {k: {max: %d}}\nrateLimiters: {r: {rate: %d, burst: 10}}\n", i, threshold, maxc, rate)
	if !valid {
		switch (i / 5) % 4 {
		case 0:
			doc = fmt.Sprintf("# version %d\nbreakers: {b: {windowSize: 10, minimumCalls: 10, failureRateThreshold: 150}}\nbulkheads: {k: {max: 1}}\nrateLimiters: {r: {rate: 1, burst: 10}}\n", i)
		case 1:
			doc = fmt.Sprintf("# version %d\nbreakers: {b: {windowSize: 20, minimumCalls: 10}}\nbulkheads: {k: {max: 1}}\nrateLimiters: {r: {rate: 1, burst: 10}}\n", i)
		case 2:
			doc = fmt.Sprintf("# version %d\nbreakers: {b: {windowSize: 10\n", i)
		case 3:
			doc = fmt.Sprintf("# version %d\nbreakers: {b: {windowSiz: 10}}\n", i)
		}
	}
	return doc, valid
}

// TestWatchReloadsEveryVersionUnderLoad rewrites the file many times
// (1000, 100 with -short) while goroutines call the instances: every valid
// version is applied (the callback reports its hash and the next version,
// and the instances hold its values), every invalid one is reported and
// changes nothing. Each write waits for its callback before the next.
func TestWatchReloadsEveryVersionUnderLoad(t *testing.T) {
	n := 1000
	if testing.Short() {
		n = 100
	}
	path := filepath.Join(t.TempDir(), "rampart.yaml")
	first, _ := version(0)
	writeAtomically(t, path, []byte(first))
	doc, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	l := mustBuild(t, doc, Options{Debounce: time.Millisecond})
	b := get[*circuitbreaker.Breaker](t, l, "b")
	k := get[*bulkhead.Bulkhead](t, l, "k")
	r := get[*ratelimit.Limiter](t, l, "r")

	events := make(chan Event, 16)
	w, err := Watch(context.Background(), path, l, func(e Event) { events <- e })
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var calls atomic.Int64
	for g := range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				var fail error
				if g == 0 {
					fail = errFail
				}
				_ = b.Do(context.Background(), func(context.Context) error { return fail })
				_ = k.Do(context.Background(), func(context.Context) error { return nil })
				r.Allow()
				calls.Add(1)
				// Yield, so that the watcher's goroutines, woken by the file
				// system, run at once rather than after a time slice of ours.
				runtime.Gosched()
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()

	want := l.Version()
	wantThreshold, wantMax, wantRate := 1.0, 1, 100.0
	for i := 1; i < n; i++ {
		data, valid := version(i)
		hash := writeAtomically(t, path, []byte(data))
		var e Event
		for e.Hash == "" {
			select {
			case e = <-events:
			case <-time.After(20 * time.Second):
				t.Fatalf("version %d: no callback", i)
			}
			if e.Hash == "" { // the watch's own error (an inotify overflow): it reads the file again
				t.Logf("version %d: %v", i, e.Err)
			}
		}
		if e.Hash != hash {
			t.Fatalf("version %d: the callback reports hash %s, want %s (err %v)", i, e.Hash, hash, e.Err)
		}
		if valid {
			want++
			wantThreshold, wantMax, wantRate = float64(1+i%99), 1+i%50, float64(100+i)
			if e.Err != nil {
				t.Fatalf("version %d: %v", i, e.Err)
			}
		} else if e.Err == nil {
			t.Fatalf("version %d, invalid, was applied", i)
		}
		if e.Version != want || l.Version() != want {
			t.Fatalf("version %d: the callback reports version %d, Live %d; want %d", i, e.Version, l.Version(), want)
		}
		if got := b.Config().FailureRateThreshold; got != wantThreshold {
			t.Fatalf("version %d: threshold %v, want %v", i, got, wantThreshold)
		}
		if k.Max() != wantMax || r.Stats().Rate != wantRate {
			t.Fatalf("version %d: max %d, rate %v; want %d, %v", i, k.Max(), r.Stats().Rate, wantMax, wantRate)
		}
		if l.Document().Hash() != hash && valid {
			t.Fatalf("version %d: the document in force is not the one written", i)
		}
	}
	if calls.Load() == 0 {
		t.Error("the load made no call")
	}
}

var errFail = rampart.NewConfigError("test", "", "a failure") // any error: the breaker counts it

func TestWatchCloseStopsTheGoroutine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.json")
	writeAtomically(t, path, []byte(`{"bulkheads": {"k": {"max": 1}}}`))
	doc, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	l := mustBuild(t, doc, Options{Debounce: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	w, err := Watch(ctx, path, l, nil)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil { // idempotent
		t.Fatal(err)
	}
	// goleak (TestMain) checks that the goroutine is gone.
}

func TestWatchReportsAChangeMadeBeforeItStarted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	writeAtomically(t, path, []byte("bulkheads: {k: {max: 1}}"))
	doc, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	l := mustBuild(t, doc, Options{Debounce: time.Millisecond})
	hash := writeAtomically(t, path, []byte("bulkheads: {k: {max: 3}}"))
	events := make(chan Event, 4)
	w, err := Watch(context.Background(), path, l, func(e Event) { events <- e })
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	e := <-events
	if e.Err != nil || e.Hash != hash || get[*bulkhead.Bulkhead](t, l, "k").Max() != 3 {
		t.Errorf("event %+v, max %d; want the new document applied", e, get[*bulkhead.Bulkhead](t, l, "k").Max())
	}
}

// TestWatchFollowsASwappedSymlinkedDirectory updates the file as a
// Kubernetes ConfigMap volume does: the file is a link through ..data, a
// link to a directory of the version, and an update renames a new link
// onto ..data; no event names the file itself.
func TestWatchFollowsASwappedSymlinkedDirectory(t *testing.T) {
	dir := t.TempDir()
	for i, body := range []string{"bulkheads: {k: {max: 1}}", "bulkheads: {k: {max: 4}}"} {
		v := filepath.Join(dir, fmt.Sprintf("v%d", i))
		if err := os.Mkdir(v, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(v, "c.yaml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("v0", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "c.yaml")
	if err := os.Symlink(filepath.Join("..data", "c.yaml"), path); err != nil {
		t.Fatal(err)
	}
	doc, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	l := mustBuild(t, doc, Options{Debounce: time.Millisecond})
	events := make(chan Event, 4)
	w, err := Watch(context.Background(), path, l, func(e Event) { events <- e })
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := os.Symlink("v1", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-events:
		if e.Err != nil || get[*bulkhead.Bulkhead](t, l, "k").Max() != 4 {
			t.Errorf("event %+v, max %d; want the new version applied", e, get[*bulkhead.Bulkhead](t, l, "k").Max())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no callback for the swapped directory")
	}
}

// TestWatchNeverAppliesAFileCaughtMidWrite rewrites the file in place with
// os.WriteFile (truncate, then write) while Watch runs: a read between the
// two finds it empty, which must never be applied as a document without
// instances.
func TestWatchNeverAppliesAFileCaughtMidWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte("bulkheads: {k: {max: 1}}"), 0o644); err != nil {
		t.Fatal(err)
	}
	doc, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	l := mustBuild(t, doc, Options{Debounce: time.Millisecond})
	var emptied, refused atomic.Int64
	w, err := Watch(context.Background(), path, l, func(e Event) {
		if _, ok := l.Registry().Get("k"); !ok {
			emptied.Add(1)
		}
		if errors.Is(e.Err, ErrEmptyDocument) {
			refused.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i := range 300 {
		if err := os.WriteFile(path, fmt.Appendf(nil, "bulkheads: {k: {max: %d}}", 1+i%7), 0o644); err != nil {
			t.Fatal(err)
		}
		runtime.Gosched()
	}
	if err := os.WriteFile(path, []byte("bulkheads: {k: {max: 9}}"), 0o644); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		if b, ok := registryBulkhead(l, "k"); ok && b.Max() == 9 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the last write was not applied in 10 s")
		}
		runtime.Gosched()
	}
	if n := emptied.Load(); n > 0 {
		t.Errorf("%d events applied an empty read: the bulkhead was removed", n)
	}
	t.Logf("%d empty reads refused", refused.Load())
}

// registryBulkhead returns the bulkhead under name, if there is one.
func registryBulkhead(l *Live, name string) (*bulkhead.Bulkhead, bool) {
	v, ok := l.Registry().Get(name)
	b, isB := v.(*bulkhead.Bulkhead)
	return b, ok && isB
}

// TestBlankFilesHoldNoDocument: what the watcher never applies (a file
// caught mid-write reads so) against what it applies as Load reads it.
func TestBlankFilesHoldNoDocument(t *testing.T) {
	for _, tc := range []struct {
		data   string
		format Format
		want   bool
	}{
		{"", YAML, true}, {" \n\t", JSON, true}, {"# only a comment\n\n", YAML, true}, {"---\n", YAML, true},
		{"{}", YAML, false}, {"{}", JSON, false}, {"bulkheads: {}", YAML, false}, {"# x", JSON, false},
		// An explicit null is a document without instances, as Load reads it.
		{"null", YAML, false}, {"~\n", YAML, false}, {"--- null\n", YAML, false}, {"null", JSON, false},
	} {
		if got := blank([]byte(tc.data), tc.format); got != tc.want {
			t.Errorf("blank(%q, %v) = %v, want %v", tc.data, tc.format, got, tc.want)
		}
	}
}

// TestWatchIsNotStarvedByAnotherFileOfTheDirectory writes another file of
// the directory more often than the debounce (a heartbeat, a lock file):
// the reload still comes, at most 10 debounce periods after the change.
func TestWatchIsNotStarvedByAnotherFileOfTheDirectory(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	writeAtomically(t, path, []byte("bulkheads: {k: {max: 1}}"))
	doc, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	l := mustBuild(t, doc, Options{Debounce: 100 * time.Millisecond})
	events := make(chan Event, 16)
	w, err := Watch(context.Background(), path, l, func(e Event) { events <- e })
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // a heartbeat file beside the config, every 20 ms
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				_ = os.WriteFile(filepath.Join(dir, "heartbeat"), []byte(time.Now().String()), 0o644)
			}
		}
	}()
	defer func() { close(stop); <-done }()
	writeAtomically(t, path, []byte("bulkheads: {k: {max: 4}}"))
	select {
	case e := <-events:
		if e.Err != nil || get[*bulkhead.Bulkhead](t, l, "k").Max() != 4 {
			t.Errorf("event %+v", e)
		}
	case <-time.After(5 * time.Second): // 50 debounce periods
		t.Fatalf("no reload 5 s after the change (debounce 100 ms): max still %d", get[*bulkhead.Bulkhead](t, l, "k").Max())
	}
}

// TestWatchSurvivesAReplacedDirectory replaces the watched directory as a
// whole (a deploy renames a new config directory into place): the changes
// made in the new directory are still seen.
func TestWatchSurvivesAReplacedDirectory(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "conf")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "c.yaml")
	writeAtomically(t, path, []byte("bulkheads: {k: {max: 1}}"))
	doc, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	l := mustBuild(t, doc, Options{Debounce: 10 * time.Millisecond})
	w, err := Watch(context.Background(), path, l, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	nd := filepath.Join(root, "conf.new")
	if err := os.Mkdir(nd, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(nd, "c.yaml"), []byte("bulkheads: {k: {max: 4}}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dir, filepath.Join(root, "conf.old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(nd, dir); err != nil {
		t.Fatal(err)
	}
	waitMax := func(want int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); get[*bulkhead.Bulkhead](t, l, "k").Max() != want; {
			if time.Now().After(deadline) {
				t.Fatalf("max %d 10 s after the change, want %d", get[*bulkhead.Bulkhead](t, l, "k").Max(), want)
			}
			runtime.Gosched()
		}
	}
	waitMax(4) // the new directory's file
	writeAtomically(t, path, []byte("bulkheads: {k: {max: 5}}"))
	waitMax(5) // and a later edit in it
}

// TestWatchFollowsASwappedDirectorySymlink: the file's directory is itself
// a link swapped to a new release (current -> releases/1, a deploy's
// "ln -sfn" then "mv -T"); the reload follows the new target.
func TestWatchFollowsASwappedDirectorySymlink(t *testing.T) {
	root := t.TempDir()
	for i, body := range []string{"bulkheads: {k: {max: 1}}", "bulkheads: {k: {max: 4}}"} {
		v := filepath.Join(root, "releases", fmt.Sprint(i))
		if err := os.MkdirAll(v, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(v, "c.yaml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cur := filepath.Join(root, "current")
	if err := os.Symlink(filepath.Join("releases", "0"), cur); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(cur, "c.yaml")
	doc, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	l := mustBuild(t, doc, Options{Debounce: time.Millisecond})
	events := make(chan Event, 4)
	w, err := Watch(context.Background(), path, l, func(e Event) { events <- e })
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := os.Symlink(filepath.Join("releases", "1"), cur+".tmp"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(cur+".tmp", cur); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-events:
		if e.Err != nil || get[*bulkhead.Bulkhead](t, l, "k").Max() != 4 {
			t.Errorf("event %+v, max %d; want the new release applied", e, get[*bulkhead.Bulkhead](t, l, "k").Max())
		}
	case <-time.After(5 * time.Second): // 5000 debounce periods
		t.Fatalf("no reload after the directory link was swapped (max still %d)", get[*bulkhead.Bulkhead](t, l, "k").Max())
	}
}

// TestEveryBlankReadAfterTheSameBytesSchedulesAReread: a blank read
// schedules one read after it; when that read finds the bytes already
// read, the next blank read schedules its own again (the flag of the
// first is cleared), and new bytes are applied.
func TestEveryBlankReadAfterTheSameBytesSchedulesAReread(t *testing.T) {
	r := reading{last: "a"}
	for i, step := range []struct {
		hash    string
		isBlank bool
		want    readAction
	}{
		{"e", true, rereadRead},
		{"e", true, blankRead}, // the reread found it blank still: no more
		{"a", false, skipRead},
		{"e", true, rereadRead},
		{"a", false, skipRead},
		{"e", true, rereadRead},
		{"b", false, applyRead},
		{"b", false, skipRead},
		{"e", true, rereadRead},
	} {
		if got := r.next(step.hash, step.isBlank); got != step.want {
			t.Fatalf("read %d (%s, blank %v): %v, want %v", i, step.hash, step.isBlank, got, step.want)
		}
	}
}
