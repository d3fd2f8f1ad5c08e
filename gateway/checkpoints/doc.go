// Package checkpoints is the room of the threads' checkpoints and
// restores: checkpoint, list, diff, undo, redo, revert and fork
// (checkpoints.go, their API in http.go), the snapshot quotas
// (snapquota.go), the restores that cannot finish (restorefail.go) and the
// checkpoint limits' refusals (limits.go).
//
// # What it promises
//
//   - A checkpoint records the workspace as a tree in the tenant's
//     snapshot repository (package snapshot) and its record in the
//     thread's history in the store (meta.History); it reads only what
//     changed since the head (the workspace's change set, package fs),
//     with the workspace's entries frozen.
//   - Undo, redo and revert restore one through fs.Restorer: the
//     workspace's uncheckpointed changes are kept in a checkpoint first,
//     running commands refuse it (or are stopped, with force), no command
//     starts meanwhile (Commands.BeginRestore), and the restore is
//     journaled in the history before the first file changes. A restore,
//     once begun, runs to its end whatever its caller does; only the
//     daemon's stop (EndRestores) cuts it short.
//   - A restore cut short by a crash or the stop is finished at the next
//     start (FinishRestore), by a takeover (FinishMoved), or by the
//     thread's next checkpoint call; one that cannot finish (quota, full
//     disk, an object missing or corrupt) is put back and its journal
//     closed (restorefail.go).
//   - A thread's checkpoints fit its snapshot quota and its tenant's:
//     the oldest that may go are dropped, else the checkpoint is refused
//     and nothing kept is dropped (snapquota.go).
//   - Unreferenced objects are collected per tenant, in the background,
//     beside the tenant's checkpoints (collect): after a checkpoint
//     dropped others, a refused one, or a thread's history dropped
//     (DropHistory).
//
// # What it owns, what it calls
//
// Checkpoints owns the tenants' repositories (opened at first use), a
// lock per tenant for its snapshot quota, the collections' goroutines and
// the restores' context. The per-thread checkpoint lock is the threads'
// (Threads.LockTurn), since a thread's delete takes it too.
//
// It calls the threads (Threads: bind, show, the checkpoint lock, paths,
// delete), the jails and jobs through Commands (a restore's quiescing),
// the quotas (package quota: a repository's folder, a thread's disk
// quota as its default snapshot quota, Checkpointed), the fs.Hub (a
// workspace's files), the events (Events) and the store. No other room
// calls into it but through its exported methods.
//
// # Lock order
//
// A thread's checkpoint lock (Threads.LockTurn) is taken first, by the
// checkpoint calls and by the threads' delete, and held across a
// checkpoint or a restore; a fork holds two, the source's and the new
// thread's, taken in the order of their keys. Under it a call may take
// the thread's lock (inside Threads.Bind, let go before it returns),
// then its tenant's repository's shared lock (snapshot.Repo.Shared,
// never twice: a collection waiting between the two would wait forever),
// then the workspace's change gate (fs.Files.Freeze), each only while the
// ones before it are held or not at all.
//
// A tenant's quota lock (tenantQuota) is taken under the repository's
// shared lock, with the change gate let go: by record, over the read of
// the tenant's histories and the store of the thread's; by fork, over the
// same and the new thread's bind (its thread lock, inside Threads.Bind)
// and restore.
//
// FinishRestore and FinishMoved are called with the thread's lock held
// (at start, by a takeover's bind) and without its checkpoint lock: no
// checkpoint call of the thread runs then, since each binds first. They
// take the repository's shared lock and the change gate under it.
//
// A restore calls Commands under the checkpoint lock and the shared
// lock: marking the thread, and with force ending its jail and waiting
// for its jobs' ends.
//
// Checkpoints.mu is a leaf of this package: it guards the repositories'
// map, the collections' maps and closed, and is held across opening a
// tenant's repository (quota.Quotas.MakeRepoFolder, which takes the
// quotas' lock, and snapshot.Open), once per tenant; never across a store
// call or a wait. keyed.Locks.mu (tenantQuota's map) is a leaf.
//
// # Goroutines
//
// A collection of a tenant's unreferenced objects (collect) runs in a
// goroutine counted in Checkpoints.wg; Close cancels it and waits for it,
// after the requests ended and before the caller may close the store. A
// restore runs in its caller's goroutine, under a context that ends only
// with EndRestores (restoreContext).
package checkpoints
