// Package ports is the room of the channels into the jails' ports: a
// command in a thread's jail listens on a port, and the harness reaches
// it through the daemon.
//
//	POST   /v1/tenants/{t}/threads/{th}/ports/{port}   {"url","token","headers","port"}
//	POST   same, with Connection: Upgrade, Upgrade: tcp 101, then the bytes of a TCP connection
//	DELETE /v1/tenants/{t}/threads/{th}/ports/{port}   {"port","closed"}
//
// # What it owns
//
// Ports owns, under its one lock mu: the channels by thread and port, the
// count of each thread's channels (for the bound, MaxPerThread), the
// plain TCP connections through the API socket (splices, tcp.go), and
// the closed flag, set by Close, after which nothing is added. A channel
// (channel.go) owns its loopback listener (127.0.0.1:0, at most
// maxConnsPerChannel connections held at once), its token (32 random
// bytes, base64url), its HTTP server, the reverse proxy's transport and
// the connections it dialed into the jail.
//
// # Promises
//
//   - A request to a channel's URL without "Authorization: Bearer
//     <token>" (compared in constant time) is answered 401 by the daemon
//     and never reaches the jail; the header is taken off the requests
//     that pass, so the jail's server never sees the token. Refusals are
//     logged: the first, then one line per refusalLogEvery with their
//     count (anyone on the host can send them).
//   - HTTP and WebSocket (any Upgrade: the reverse proxy splices the
//     upgraded connection) reach the port on the jail's loopback,
//     127.0.0.1 and then ::1, dialed inside the jail's network namespace
//     (jail.Dial): the same in every network mode, "none" included. The
//     jail's server sees the Host the client sent.
//   - One channel per thread and port: a second POST returns the same URL
//     and token while the jail lives. A POST binds the thread and starts
//     its jail if need be, as a command does (Jails.Acquire); a DELETE
//     starts nothing. Past MaxPerThread channels (64) a POST is refused
//     (409) until one closes; a port outside 1..65535 is a 400.
//   - A channel closes, and its URL refuses connections, by the time the
//     call that closes it returns: its DELETE (which cuts the plain TCP
//     connections to that port too), the close of its thread (even while
//     jobs keep the jail: CloseThread, from the threads room), and every
//     end of its jail (JailEnded, from the jails room: a delete, the idle
//     reclaim, the bound of live jails, a restore with force, a dead init
//     replaced, the daemon's stop). Closing it ends its requests and
//     WebSockets (their connections into the jail are closed) and waits
//     for them. A channel opened while its jail was ending is refused: the
//     jail's Err is checked under mu after JailEnded may have run.
//   - Plain TCP through the API socket is peer-checked as every call; a
//     port nothing listens on is a 409 before any upgrade.
//   - Each new connection into a jail counts as a use of it (Jails.Touch),
//     so a jail served through a channel is not reclaimed as idle.
//
// # What it calls
//
// The jails (Jails, an interface of its own that *jails.Jails
// satisfies: Acquire and Touch) and package jail (Dial). The jails room
// calls JailEnded (jails.Ended, wired by AddEnded) and the threads room
// CloseThread (threads.Deps.Ports); package gateway wires both at Start
// and closes the room after the jails (Close).
//
// # Lock order
//
// mu is a leaf, held over map work only: never across a jail's start, a
// dial, a channel's close or a wait. A channel's own mu (its closed flag
// and its connections) is a leaf too, never taken under Ports.mu. The
// jails room calls JailEnded with none of its locks held; the threads
// room calls CloseThread under the thread's lock, which this room never
// takes.
//
// # Goroutines
//
// Each open channel's server (serve), started by Open and ended by the
// channel's close, and each channel being closed by removeLocked; Close
// waits for both (wg). The server's own goroutines (one per connection,
// and the reverse proxy's copies of an upgraded connection) end when the
// channel's close closes the listener and the connections, and close
// waits for the requests among them (channel.reqs). A splice's copies run
// in its API request's handler (ServeStream), which the gateway's request
// set waits for; they end when both directions end or when the splice is
// cut.
package ports
