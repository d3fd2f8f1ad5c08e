// Package events is the room of the event stream: what happens to
// threads, told as it happens to whoever reads GET /v1/events, and kept
// for a reader that comes back with since.
//
// It owns one Bus (bus.go), and the Bus owns:
//
//   - the broker (broker.go), which numbers and stamps each event (Emit)
//     and queues it for every subscriber whose filter it passes, never
//     waiting for one: a full queue drops the event and counts the loss,
//     told as a missed event before the next delivery;
//   - the event log (log.go), the newest events in a file mapped into
//     memory and a ring, for replay across restarts; its lines are
//     encoded once, without reflection (json.go);
//   - the file events (files.go), which turn the filesystem's changes
//     (OnChange) into events, one per path per window, and their window
//     goroutine;
//   - the callbacks a mount reports refusals through (OnRefusal,
//     OnStale), which count them (Config.Refusals) and emit them;
//   - the stream of GET /v1/events (http.go, Handlers), and its watcher
//     goroutine, which the stream stops and waits for when it returns.
//
// It calls no other room: the refusals are counted through
// Config.Refusals, a small interface that package metrics' Metrics
// satisfies.
//
// # Locks
//
// fileEvents.mu (the paths in their change windows) is called under a
// path lock of package fs (a change is told as it is made), and takes
// broker.mu under it (Emit), so that file events keep the order of the
// changes. broker.mu is a leaf: numbering an event, appending it to the
// log (a copy into the file's mapping; a write should that fault; the
// file made anew when it is full) and offering it to each queue, adding
// or removing a subscriber. It is never held across a wait for a reader.
//
// # Goroutines
//
// The file events' window goroutine is started by New and stopped and
// waited for by Close, which also ends every subscription (the streams
// then end) and closes the log. A stream's watcher belongs to its
// stream: ServeStream stops it and waits for it before it returns.
package events
