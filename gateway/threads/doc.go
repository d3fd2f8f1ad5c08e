// Package threads is the room of the threads a daemon serves: their
// bindings in the metadata store, their locks, their workspace folders,
// their sealed mount points and their FUSE mounts, the start's restore of
// what a former run served, the take-over of a thread another host
// served, and the fence that takes down what a lapsed lease covered.
//
// # What it promises
//
//   - One folder per thread: WorkspaceRoot encodes each id into one path
//     component, so two different pairs never share a folder and nothing
//     lands outside the base folder (a refusal, never a clamp).
//   - Bind is lazy, idempotent and not remembered when it fails: a failed
//     bind leaves no record, no mount, no admission slot and no folder it
//     created (undoStack).
//   - A record that says bound while no mount serves it is a valid state:
//     the next call that needs the thread mounts it again.
//   - Destructive steps never trust a stored path: delete removes the
//     recorded root only if it is a workspace root of the thread's own ids
//     (RootOf), and only after every mount of it is gone. A delete is
//     recorded first (state deleting); a thread being deleted answers as
//     gone, and the next delete or start finishes it.
//   - A thread whose folder vanished is gone (410), never served empty.
//   - A mount point no mount serves refuses writes, even root's: it is
//     immutable from when it is made until delete removes it; what is
//     found in one before a mount is moved aside, never covered
//     (mountpoint_linux.go).
//   - A restart serves at once: Restore does what must not race a call
//     (detach a former run's mounts, finish its deletes, reconcile the
//     folders with the records), and the mounts come back in the
//     background (StartRestore, package remount); a call for a thread the
//     background has not come to does its part itself (BindLocked).
//   - With a host id, a thread is served only under this host's pin
//     (package hosts); once the lease lapsed, Fence takes down what it
//     covered.
//
// # What it owns and calls
//
// Threads owns the mounts (threadSet), the thread locks and the turn
// locks (package keyed), and the background restore's queue and workers.
// It calls the hosts, the quotas, the events and the metrics, which are
// made before it, and, through the small interfaces of Deps wired by
// Attach, the rooms made after it: the jails (close a thread's jail, run
// a seed, resettle), the jobs (their count, their notes, their end), the
// inspection mounts (a delete's) and the checkpoints (a restore a crash
// cut short, a moved thread's, a delete's history). A thread's close and
// delete end its jail before its jobs, and both before its mount.
//
// # Lock order
//
// A thread's turn lock (LockTurn; checkpoints, restores and delete) is
// taken before its thread lock (Lock), which is held across the slow
// steps of an operation on that thread (mounting, store writes, removing
// folders, ending a jail) and is the only thread lock held at a time; no
// global lock is held during a mount. Under it the leaves, one at a time:
// threadSet.mu (the mounts, the closed and drained flags), under which
// the admitter's lock is taken (package threadlimit: a mount kept holds
// its slot), and keyed.Locks' own map lock. Fence takes thread locks: the
// hosts room is closed holding none.
//
// # Goroutines
//
// The background restore's workers (package remount): StopRestore takes
// no more threads, EndRestore ends the one under way and waits for them.
// A mount's FUSE server is its entry in threadSet until Drain hands it to
// the caller, which unmounts it.
package threads
