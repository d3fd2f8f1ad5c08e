package events

import (
	"sync"
	"time"

	"warren/api"
	"warren/fs"
	"warren/meta"
)

// File events. The filesystem tells every change of an entry, through a
// mount or the file API, as it happens (fs.EntryChange), and only while
// someone reads the thread's events (Bus.Wants). fileEvents turns the
// changes into events:
//
//   - a creation, removal or rename is told at once, after any change of
//     the same paths still held back, so a reader sees them in order;
//   - a change is told at once if its path had no change and was not
//     created in the last fileEventWindow, else held back and told, the
//     latest one, when the window ends: a burst of writes is one event
//     per window, and a file created and written at once (a copy, an
//     untar: the write, then the times set) is told as its creation and
//     one change.
//
// A goroutine of the Bus ends the windows; Bus.Close stops it.

// fileEventWindow is how often at most one path's changes are told.
const fileEventWindow = 100 * time.Millisecond

type fileEvents struct {
	emit func(api.Event)

	mu      sync.Mutex
	pending map[fileKey]heldChange // guarded by mu; values, not pointers: one allocation less per new file
	stop    chan struct{}
	done    chan struct{}
}

// fileKey is one path of one thread.
type fileKey struct {
	k    meta.ThreadKey
	path string
}

// heldChange is a path in its window: quiet until then, with the latest
// change held back if one came (dirty).
type heldChange struct {
	until time.Time
	dirty bool
	last  fs.EntryChange
}

func newFileEvents(emit func(api.Event)) *fileEvents {
	fe := &fileEvents{emit: emit, pending: make(map[fileKey]heldChange), stop: make(chan struct{}), done: make(chan struct{})}
	go fe.loop()
	return fe
}

// close stops the window goroutine and waits for it; changes held back
// then are dropped (nobody reads them at shutdown).
func (fe *fileEvents) close() {
	close(fe.stop)
	<-fe.done
}

// of returns the change callback of thread k's mounts and file API.
func (fe *fileEvents) of(k meta.ThreadKey) func(fs.EntryChange) {
	return func(c fs.EntryChange) { fe.changed(k, c) }
}

func (fe *fileEvents) changed(k meta.ThreadKey, c fs.EntryChange) {
	now := time.Now()
	key := fileKey{k, c.Path}
	var out []fs.EntryChange
	fe.mu.Lock()
	if c.Kind == fs.Changed {
		if h, ok := fe.pending[key]; ok && now.Before(h.until) {
			h.dirty, h.last = true, c
			fe.pending[key] = h
			fe.mu.Unlock()
			return
		}
		fe.pending[key] = heldChange{until: now.Add(fileEventWindow)}
		out = append(out, c)
	} else {
		// What is held back of these paths goes first.
		for _, p := range []string{c.From, c.Path} {
			if p == "" {
				continue
			}
			if h, ok := fe.pending[fileKey{k, p}]; ok {
				if h.dirty {
					out = append(out, h.last)
				}
				delete(fe.pending, fileKey{k, p})
			}
		}
		out = append(out, c)
		if c.Kind == fs.Created {
			// A new file's first writes come right after its creation
			// (a copy, an untar): they are its window's one change.
			fe.pending[key] = heldChange{until: now.Add(fileEventWindow)}
		}
	}
	// Emitted under mu: the order of the events is the order of the
	// changes (publish never blocks).
	for _, c := range out {
		fe.emit(fileEvent(k, c))
	}
	fe.mu.Unlock()
}

// loop ends the windows: a held-back change is told, and its path gets
// another window; a quiet path is forgotten.
func (fe *fileEvents) loop() {
	defer close(fe.done)
	t := time.NewTicker(fileEventWindow / 2)
	defer t.Stop()
	for {
		select {
		case <-fe.stop:
			return
		case <-t.C:
		}
		now := time.Now()
		fe.mu.Lock()
		for key, h := range fe.pending {
			if now.Before(h.until) {
				continue
			}
			if !h.dirty {
				delete(fe.pending, key)
				continue
			}
			fe.emit(fileEvent(key.k, h.last))
			fe.pending[key] = heldChange{until: now.Add(fileEventWindow)}
		}
		fe.mu.Unlock()
	}
}

// fileEvent is the event of change c of thread k.
func fileEvent(k meta.ThreadKey, c fs.EntryChange) api.Event {
	ev := api.Event{Tenant: k.Tenant, Thread: k.Thread, Path: c.Path, From: c.From, Version: c.Version}
	switch c.Kind {
	case fs.Created:
		ev.Type = api.EventFileCreated
	case fs.Removed:
		ev.Type = api.EventFileRemoved
	case fs.Renamed:
		ev.Type = api.EventFileRenamed
	default:
		ev.Type = api.EventFileChanged
	}
	if c.Actor != (fs.Actor{}) {
		ev.Actor = c.Actor.String()
	}
	return ev
}
