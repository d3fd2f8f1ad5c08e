// Package admit bounds what the API's clients hold at once: open
// connections, requests being answered, request bodies still arriving,
// raw uploads and long-lived streams, each in total, per peer uid and per
// thread. Past a bound a request is refused at once (the gateway answers
// 503 "unavailable" with Retry-After); nothing waits for a place, so a
// refused client gives its descriptor and its goroutine back at once.
//
// # What it owns
//
// One Admitter owns every counter and their lock. The gateway asks it at
// two places: the listener (Listener) counts connections at accept, by
// the peer's uid, and writes a 503 to a connection past the bound before
// closing it; the router (Enter) counts each request by its kind, its
// peer's uid and its thread, before the handler runs.
//
// # Isolation
//
// The per-thread bound is what keeps one thread from starving another:
// Limits.Check refuses limits whose per-uid or total bound one thread
// alone could reach (a harness usually calls for every thread with one
// uid). Connections are counted before any request names a thread, so
// they have no per-thread bound; what one thread's requests hold is
// bounded by the per-thread bounds of the request kinds, and a connection
// that sends nothing is closed by the server's header timeout.
//
// # Lock order
//
// Admitter.mu is a leaf: nothing is called while it is held.
package admit
