// Package replicas is the gateway's room that copies checkpoints to the
// snapshot store other servers read (serve --snapshots s3://…): it owns
// the store (snapshot/replica), the cache of its packs' heads, and one
// uploader goroutine that sends the checkpoints in the order they were
// taken, retrying each until it is in, then marks it replicated in its
// thread's history.
//
// The local repository stays the checkpoints' truth and a checkpoint is
// acknowledged before it is uploaded: the store is where another server
// would fetch it from, so an unreachable store
// delays replication, not a checkpoint, until the backlog reaches its
// bound (below). The queue is not durable: the
// histories are. At Start every checkpoint of the threads this host
// serves that is not marked replicated is queued again, oldest first, so
// an upload cut short by a stop or kill -9 is finished by the next start
// (replica.Upload resumes: it sends only the packs the store lacks).
//
// The room also collects the store (collect.go): a collector goroutine
// sweeps it (replica.Sweep) every CollectEvery across the servers, and
// soon after a thread's delete (Dropped), with the trees of every
// history in the metadata store as the live set. The servers take turns
// through a claim in the metadata store (meta.Claim); the sweep's
// safety does not rest on it (two at once are safe), only its cost.
// Uploads are bounded so that the sweep's grace covers them.
//
// The backlog is bounded (Config.CacheBytes, serve
// --snapshot-cache-bytes): its bytes are the own bytes of the
// checkpoints waiting, what the snapshot quotas count of them, kept with
// the queue as jobs come and go, and counted again from the histories
// while the store fails (Admit, recount). The checkpoints ask Admit
// before they record one, and a checkpoint past the bound is refused: a
// kept checkpoint's objects are never deleted before they are in the
// store (they stay in the local repository, the truth), so the bound is
// what keeps an outage of the store from growing the backlog without
// end.
//
// For a thread that moves here (serve --on-unreachable restore), the
// room fetches trees from the store (fetch.go: Fetch, checked object by
// object, one fetch per tree at a time, a mark on disk until it is
// whole), and reads what the former host last put of the paths changed
// since the thread's last checkpoint; it puts this host's own every
// PendingEvery (pending.go).
package replicas
