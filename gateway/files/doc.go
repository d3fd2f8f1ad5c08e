// Package files is the room of the file API (docs/openapi.yaml, the
// .../files/... and .../runs calls): read, write and edit a file of a
// thread's workspace, list, stat, make, remove and rename its entries,
// stream a file's raw content both ways, and register or end an agent's
// run, on behalf of a harness that serves many runs from one process.
//
// The work is done by the fs core (*fs.Hub) on the thread's backing
// folder, through the same locks, versions, read records and change log
// as the thread's mounts, never through the daemon's own mount (a process
// must not use a mount it serves). A modification based on a stale read
// is refused (409 stale), counted and told as a write.stale event
// (by package events, as for the mounts and the checkpoints). A
// file read, written or edited whole is bounded by fs.MaxFileBytes (its
// request body by MaxFileBody); raw content streams, and a raw upload has
// no size bound but the thread's disk quota.
//
// It owns no state, lock or goroutine of its own: a call binds its thread
// if need be (Threads.Bind), opens its workspace on the hub for the call
// and closes it after. It calls the threads (Threads), the events
// (Events: its stale refusals, OnStale) and the file events
// (Config.Changes),
// and no other room; the Gateway wires them at Start.
package files
