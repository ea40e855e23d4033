package rampartconfig

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Event reports one reload attempt of a [Watcher].
type Event struct {
	// Path is the file watched.
	Path string
	// Hash is the SHA-256 (hex) of the bytes read ("" when the file could
	// not be read).
	Hash string
	// Version is the Live's version after the attempt: one more than
	// before when the document was applied, unchanged otherwise.
	Version uint64
	// Err is why the document was not applied (a read, syntax or
	// validation error, or an Update refusal): the configuration in force
	// is kept. Nil when it was applied.
	Err error
}

// Watcher reloads a file into a [Live] when it changes. Create it with
// [Watch]; stop it with Close or by ending Watch's context.
type Watcher struct {
	cancel context.CancelFunc
	done   chan struct{}
	fsw    *fsnotify.Watcher
	once   sync.Once
	err    error
}

// Watch watches the file at path and applies it to l after every change:
// it watches the file's directory (an editor replaces a file by renaming
// another onto it, a Kubernetes ConfigMap swaps a symlinked directory),
// waits for l's Options.Debounce without a further change in it, reads the
// file and, when its bytes differ from the last ones read, loads and
// applies it (all or nothing, as [Live.Apply]). onEvent
// (may be nil) is told each attempt, with the hash of the bytes and the
// version applied, or why the old configuration was kept. At the start it
// checks the file once, so a change made before Watch is not missed (the
// bytes of l's document, when it was loaded, count as read).
//
// onEvent runs on the watcher's goroutine, one event at a time, and must
// not call Close. The goroutine ends when ctx is done or Close is called;
// call Close in either case, to release the file system watch.
func Watch(ctx context.Context, path string, l *Live, onEvent func(Event)) (*Watcher, error) {
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		_ = fsw.Close()
		return nil, err
	}
	if err := fsw.Add(filepath.Dir(abs)); err != nil {
		_ = fsw.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &Watcher{cancel: cancel, done: make(chan struct{}), fsw: fsw}
	debounce := l.opts.Debounce
	if debounce <= 0 {
		debounce = 100 * time.Millisecond
	}
	last := ""
	if d := l.Document(); d != nil {
		last = d.Hash()
	}
	go w.run(ctx, abs, path, l, onEvent, debounce, last)
	return w, nil
}

// run is the watcher's goroutine.
func (w *Watcher) run(ctx context.Context, abs, path string, l *Live, onEvent func(Event), debounce time.Duration, last string) {
	defer close(w.done)
	// The debounce timer runs on real time: a file system's events are.
	timer := time.NewTimer(0) // the check at the start
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-w.fsw.Events:
			if !ok {
				return
			}
			// Any change in the directory may be the file's: an editor
			// renames a temporary file onto it, and a Kubernetes ConfigMap
			// swaps the symlinked directory the file's link goes through.
			// The bytes decide: those already read are skipped.
			timer.Reset(debounce)
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return
			}
			if onEvent != nil {
				onEvent(Event{Path: path, Version: l.Version(), Err: err})
			}
			// An error (a queue overflow) may have lost a change: read
			// the file again.
			timer.Reset(debounce)
		case <-timer.C:
			data, err := os.ReadFile(abs)
			if err != nil {
				if errors.Is(err, os.ErrNotExist) && last == "" {
					continue
				}
				last = ""
				if onEvent != nil {
					onEvent(Event{Path: path, Version: l.Version(), Err: err})
				}
				continue
			}
			sum := sha256.Sum256(data)
			hash := hex.EncodeToString(sum[:])
			if hash == last {
				continue
			}
			last = hash
			doc, err := Load(data, FormatOf(abs))
			if err == nil {
				err = l.Apply(doc)
			}
			if onEvent != nil {
				onEvent(Event{Path: path, Hash: hash, Version: l.Version(), Err: err})
			}
		}
	}
}

// Close stops the watcher and waits for its goroutine to end (an onEvent
// in progress returns first). It is idempotent.
func (w *Watcher) Close() error {
	w.once.Do(func() {
		w.cancel()
		<-w.done
		w.err = w.fsw.Close()
	})
	return w.err
}
