// Package badger is the embedded engine of the metadata store: a
// meta.Store in one Badger database in a folder on the local disk, the
// default for a single server. Open it with Open; only one process may
// hold a folder at a time.
//
// Records are JSON values under the keys of meta/internal/keys; revisions
// come from a counter kept beside them (store.go). All of them stay in the
// LSM tree, threads' histories too (history.go), which may be a megabyte:
// compaction drops what a rewrite replaced. Hosts' leases count on this
// machine's clock (hosts.go). Every write is synced before it
// returns, so an acknowledged write survives kill -9, and on a nearly full
// disk writes are refused with meta.ErrNoSpace while reads go on, instead
// of Badger dying of SIGBUS in its mmap'd files (space.go: MinFreeBytes,
// BallastBytes).
//
// Its tests run the conformance suite (warren/meta/metatest) and what is
// Badger's own: reopening, a kill in the middle of a write, a full disk.
package badger
