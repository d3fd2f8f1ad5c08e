// Package hosts is the room of the hosts: this daemon's hold on its host
// id in the metadata store, and the pins of the threads it serves.
//
// A daemon with a host id keeps a lease in the store (a lease.Session:
// heartbeats every RenewEvery; the lease lapses after ExpiresAfter
// without one) and pins every thread it serves: the pin lasts as long as
// the lease, and while it lasts every other daemon refuses the thread
// (Claim answers ErrPinned, naming the owner and its folder). When a host
// dies its lease lapses, its pins go with it, and the next daemon that
// gets a call for one of its threads pins it and takes it over (package
// threads decides what the thread becomes: resumed, fresh or gone).
//
// Fencing: a daemon never serves a pinned thread beyond what its lease
// covers (package lease counts the lease valid a margin short of the
// store's view of it), and once a lease ended the session calls the
// Fence it was given, which takes down every thread served under it
// (package threads). Without a host id there is no lease: Claim refuses
// only threads another host holds a live pin on.
//
// The check a call pays is a map look-up and a clock read (Claim, through
// Session.Holds): a pin made under the current lease holds until the
// lease lapses, so it is not read again from the store.
//
// Hosts owns the session (its heartbeat and fence goroutines: Close ends
// them and waits); it calls no other room: the fence is a function the
// daemon gives it. Its only lock is the session's, a leaf (package lease).
package hosts
