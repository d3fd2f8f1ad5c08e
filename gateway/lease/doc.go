// Package lease is a host's hold on its host id in the metadata store: a
// lease kept alive by heartbeats, the threads pinned under it, and the
// fence that runs when the lease ends. It is shaped like etcd's
// concurrency.Session: Start, Holds, Pin, Done, Close. It depends only on
// the host calls of the store (Hosts), so it is tested over a real Badger
// store without root or FUSE.
//
// # What it promises
//
//   - Start returns once the first heartbeat gave the session a lease;
//     until Close, a heartbeat every Config.RenewEvery renews it (the store
//     lets it lapse after Config.ExpiresAfter without one).
//   - Holds never reports a lease the store may already have ended: the
//     session counts its lease valid until the time it sent its last
//     successful heartbeat plus ExpiresAfter, minus Margin. The store
//     renews the lease when it receives the heartbeat, later than it was
//     sent, so the store's lease never ends before the session's view of
//     it.
//   - A pin is recorded only if the lease it was made under is still in
//     force when the store answered; a pin made under a lease that ended
//     meanwhile is refused (meta.ErrLeaseLost), as the store no longer
//     counts it.
//   - When a lease ends, by a lapse (no heartbeat succeeded in time, or the
//     store refused a pin for it) or a loss (the store refused to renew it),
//     Config.Fence is called once for that end, with every thread pinned
//     under the lease. A lost lease is replaced by a new one in the same
//     heartbeat, and the threads pinned under it are held again only once
//     pinned again. A lapsed one is renewed by the next heartbeat the store
//     accepts (its pins hold again: the store kept them), or replaced if
//     the store had let it go.
//   - The session does not end by itself: a lease that ends is replaced.
//     Done is closed only by Close, once every goroutine of the session has
//     returned. Whoever needs to know whether the lease holds now asks
//     Holds.
//   - Close ends the heartbeats and waits for them and for a fence under
//     way (whose context it cancels). It does not revoke the lease: it runs
//     out, so that a restart of the host in time takes its pins over
//     without a gap; until then Holds still answers by the clock. Close may
//     be called twice, or at once from several goroutines.
//
// One host id is one holder: a second session on the same id takes the
// host's lease over (the store grants a lease with lease id zero whatever
// the host held), the first learns it at its next heartbeat, fences, and
// takes a new lease in turn. Do not run two.
//
// # Goroutines
//
// A session owns two goroutines, both started by Start and both ended and
// waited for by Close: the heartbeat goroutine (keep), which renews or
// replaces the lease every RenewEvery, and the fence goroutine (fenceLoop),
// which waits for the lease's lapse by the clock or for a heartbeat to
// end it, and calls Config.Fence. Fences therefore run one at a time, and
// heartbeats go on while one runs (ending jobs may wait on the store). A
// lease that ends while a fence runs is fenced next, never dropped.
//
// # Lock
//
// Session.mu guards the lease's id, its validity, the pins and the fences
// due. It is a leaf: it is held only over map and clock work, never over a
// store call or the fence callback, so Holds, Pin and Unpin may be called
// under any lock of the caller, and the fence callback may call them.
package lease
