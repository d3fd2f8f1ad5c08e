// Package replicas is the gateway's room that copies checkpoints to the
// snapshot store other servers read (serve --snapshots s3://…): it owns
// the store (snapshot/replica), the cache of its packs' heads, and one
// uploader goroutine that sends the checkpoints in the order they were
// taken, retrying each until it is in, then marks it replicated in its
// thread's history.
//
// The local repository stays the checkpoints' truth and a checkpoint is
// acknowledged before it is uploaded: the store is where another server
// would fetch it from (not in this room yet), so an unreachable store
// delays replication, not a checkpoint, until the backlog reaches its
// bound (below). The queue is not durable: the
// histories are. At Start every checkpoint of the threads this host
// serves that is not marked replicated is queued again, oldest first, so
// an upload cut short by a stop or kill -9 is finished by the next start
// (replica.Upload resumes: it sends only the packs the store lacks).
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
// Not here yet: fetching trees on another server, deleting from the
// store (a collection across servers), and a restore from the store of a
// thread whose folder is unreachable.
package replicas
