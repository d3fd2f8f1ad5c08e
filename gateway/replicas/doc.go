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
// delays replication, never a checkpoint. The queue is not durable: the
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
// Not here yet: fetching trees on another server, a bound on the cache,
// and a restore from the store of a thread whose folder is unreachable.
package replicas
