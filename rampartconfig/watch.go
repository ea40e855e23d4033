package rampartconfig

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.yaml.in/yaml/v3"
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

// ErrEmptyDocument is the Err of an [Event] whose read found a file with
// no document in it (no bytes, or only blanks and comments): a [Watcher]
// never applies it, since a file caught mid-write (os.WriteFile truncates,
// then writes) reads empty. The configuration in force is kept, and the
// file is read again after the debounce. To remove every instance, write
// an explicit empty document ("{}", or null: YAML's "null" or "~", JSON's
// null), which Watch applies as [Load] reads it.
var ErrEmptyDocument = errors.New("rampartconfig: the file holds no document (caught mid-write?): the configuration in force is kept")

// blank reports whether data holds no document: nothing but blanks and
// comments (YAML: and document markers), or nothing but blanks (JSON). An
// explicit null ("null", "~" in YAML, null in JSON) is a document, without
// instances, as [Load] reads it: nothing written in part reads as one.
func blank(data []byte, format Format) bool {
	if len(bytes.TrimSpace(data)) == 0 {
		return true
	}
	if format != YAML {
		return false
	}
	var n yaml.Node
	if yaml.Unmarshal(data, &n) != nil {
		return false
	}
	if n.Kind == 0 { // comments only
		return true
	}
	// A document marker alone ("---") holds an implicit null, with no
	// value written.
	return n.Kind == yaml.DocumentNode && len(n.Content) == 1 &&
		n.Content[0].Kind == yaml.ScalarNode && n.Content[0].Tag == "!!null" && n.Content[0].Value == ""
}

// reading is what a [Watcher] keeps between two reads of the file.
type reading struct {
	last   string // the hash of the last bytes read and not blank
	reread bool   // a blank read scheduled the read after it
}

// readAction is what a Watcher does with the bytes it read.
type readAction int

const (
	skipRead   readAction = iota // the bytes already read: nothing to do
	blankRead                    // ErrEmptyDocument, no read scheduled
	rereadRead                   // ErrEmptyDocument, and read again after a debounce
	applyRead                    // load and apply them
)

// next returns what to do with bytes of the given hash, blank or not,
// and takes them as read.
func (r *reading) next(hash string, isBlank bool) readAction {
	switch {
	case hash == r.last:
		// The bytes already read (a write that put back the same
		// ones after a blank read): the blank read is over, and the
		// next one schedules its read again.
		r.reread = false
		return skipRead
	case isBlank:
		// Most likely a write caught between its truncate and its
		// write (os.WriteFile): never applied as "remove everything".
		// The bytes are not taken as read, and the file is read once
		// more after a debounce, for the write whose event was already
		// consumed.
		if r.reread {
			return blankRead
		}
		r.reread = true
		return rereadRead
	}
	r.reread = false
	r.last = hash
	return applyRead
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
// A file that reads empty is never applied (see [ErrEmptyDocument]). The
// debounce waits at most 10 periods after the first change not yet read,
// so that another file of the directory written all the time does not
// postpone the reload. When the directory itself is removed or renamed
// (a deploy that renames a new directory into its place), the watch is
// set again on the path, retried every debounce until it exists. When the
// directory is itself a symbolic link (current -> releases/42, swapped by
// "ln -sfn releases/43 current.tmp && mv -T current.tmp current"), its
// parent is watched too, and the watch follows the link's new target.
//
// Write the file atomically: write a temporary file in the same directory
// and rename it onto the path, as editors and ConfigMaps do. A file
// rewritten in place in several writes may be read between two of them,
// half written: the part read is then applied when it happens to be a
// valid document, or reported as an error otherwise (the configuration in
// force kept, and the whole file read after the next write's event).
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
	// A directory that is itself a symlink (current -> releases/42) is
	// swapped by renaming another link onto it: the event is in its
	// parent's directory (the watch of the directory follows the old
	// target's inode), and any event naming the link re-watches the path.
	linked := false
	if fi, err := os.Lstat(filepath.Dir(abs)); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		if err := fsw.Add(filepath.Dir(filepath.Dir(abs))); err == nil {
			linked = true
		}
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
	go w.run(ctx, abs, path, l, onEvent, debounce, last, linked)
	return w, nil
}

// run is the watcher's goroutine.
func (w *Watcher) run(ctx context.Context, abs, path string, l *Live, onEvent func(Event), debounce time.Duration, last string, linked bool) {
	defer close(w.done)
	// The debounce timer runs on real time: a file system's events are.
	timer := time.NewTimer(0) // the check at the start
	defer timer.Stop()
	dir := filepath.Dir(abs)
	var since time.Time // the first event not yet read after
	rewatch := false    // the directory itself was removed or renamed
	rd := reading{last: last}
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return
			}
			if filepath.Clean(ev.Name) == dir && (linked || ev.Has(fsnotify.Remove|fsnotify.Rename)) {
				// The watch follows the old directory's inode: watch the
				// path again once something is there.
				_ = w.fsw.Remove(dir)
				rewatch = true
			}
			// Any change in the directory may be the file's: an editor
			// renames a temporary file onto it, and a Kubernetes ConfigMap
			// swaps the symlinked directory the file's link goes through.
			// The bytes decide: those already read are skipped. The wait
			// is bounded (10 debounce periods after the first event), so
			// that another file written all the time in the directory
			// does not postpone the reload for ever.
			now := time.Now()
			if since.IsZero() {
				since = now
			}
			timer.Reset(max(0, min(debounce, since.Add(10*debounce).Sub(now))))
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
			since = time.Time{}
			if rewatch {
				if err := w.fsw.Add(dir); err != nil {
					timer.Reset(debounce) // not there yet
					continue
				}
				rewatch = false
			}
			data, err := os.ReadFile(abs)
			if err != nil {
				if errors.Is(err, os.ErrNotExist) && rd.last == "" {
					continue
				}
				rd.last = ""
				if onEvent != nil {
					onEvent(Event{Path: path, Version: l.Version(), Err: err})
				}
				continue
			}
			sum := sha256.Sum256(data)
			hash := hex.EncodeToString(sum[:])
			act := rd.next(hash, blank(data, FormatOf(abs)))
			if act == skipRead {
				continue
			}
			if act != applyRead {
				if onEvent != nil {
					onEvent(Event{Path: path, Hash: hash, Version: l.Version(), Err: ErrEmptyDocument})
				}
				if act == rereadRead {
					timer.Reset(debounce)
				}
				continue
			}
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
