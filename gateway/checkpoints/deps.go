package checkpoints

import (
	"context"

	"warren/api"
	"warren/meta"
	"warren/snapshot"
	"warren/snapshot/replica"
)

// Threads is what the checkpoints call of the threads.
type Threads interface {
	// Bind binds a thread (lazily, idempotently) and returns it.
	Bind(ctx context.Context, tenant, thread string) (api.ThreadInfo, error)
	// Show returns a thread without binding it.
	Show(ctx context.Context, tenant, thread string) (api.ThreadInfo, error)
	// LockTurn takes k's checkpoint lock, which serializes the thread's
	// checkpoints, restores and delete; it is taken before the thread's
	// lock (the one Bind takes) when both are.
	LockTurn(ctx context.Context, k meta.ThreadKey) (unlock func(), err error)
	// Paths are k's workspace folder and mount path.
	Paths(k meta.ThreadKey) (root, mountPath string, err error)
	// RootOf is b's workspace folder, checked.
	RootOf(b meta.Binding) (string, error)
	// Delete deletes a thread; it takes the thread's checkpoint lock.
	Delete(ctx context.Context, tenant, thread string) error
}

// Commands is what a restore calls of the jails and the jobs: no command
// or job of the thread may run while its workspace is restored.
type Commands interface {
	// BeginRestore marks k as being restored (why says how): no command
	// starts in its jail until EndRestore. It returns the ids of the
	// commands that run.
	BeginRestore(k meta.ThreadKey, why string) []string
	// EndRestore lifts BeginRestore's mark.
	EndRestore(k meta.ThreadKey)
	// RunningJobIDs are the ids of k's jobs that run.
	RunningJobIDs(k meta.ThreadKey) []string
	// NoteStopping records why k's jobs are about to end.
	NoteStopping(k meta.ThreadKey, why string)
	// CloseJail ends k's jail, and with it its commands and jobs.
	CloseJail(k meta.ThreadKey)
	// WaitThreadJobs waits until the ends of k's jobs are recorded.
	WaitThreadJobs(k meta.ThreadKey)
}

// Events is where the checkpoints tell what they did.
type Events interface {
	Emit(api.Event)
	// Wants says whether some stream wants k's events: an event whose
	// paths cost a diff is made only then.
	Wants(k meta.ThreadKey) bool
}

// Replicas copies checkpoints to the snapshot store other servers read
// (package gateway/replicas); Config.Replicas is nil without a store.
type Replicas interface {
	// Replicate queues the upload of checkpoint cp of k, recorded in its
	// history; base is the tree of the checkpoint it was taken after (its
	// parent), "" for none: what the store holds already. It returns at
	// once: the upload runs in the background and marks cp Replicated.
	Replicate(k meta.ThreadKey, cp meta.Checkpoint, base string)
	// Whole reports, without reading it, whether repo holds the whole of
	// tree: a thread that moved here finds the trees of its checkpoints
	// in the store only.
	Whole(tenant string, repo *snapshot.Repo, tree snapshot.Hash) bool
	// Fetch brings what repo lacks of tree from the store, checked; the
	// caller holds repo's shared lock. A tree the store lacks is an error
	// matching replica.ErrNotFound, a copy that fails its checks one
	// matching replica.ErrCorrupt; any other error means the store could
	// not be read.
	Fetch(ctx context.Context, tenant string, repo *snapshot.Repo, tree snapshot.Hash) (replica.FetchStats, error)
	// Pending returns the paths k's host last said it changed since the
	// thread's last checkpoint (an error matching replica.ErrNotFound if
	// it said nothing).
	Pending(ctx context.Context, k meta.ThreadKey) (replica.Pending, error)
	// Dropped says that a thread of tenant was deleted, its history gone:
	// the store's objects that no other checkpoint references go at a
	// collection begun soon. It returns at once.
	Dropped(tenant string)
	// Admit says whether a checkpoint whose own bytes (SnapshotBytes)
	// are own may be recorded: an error, beginning "the snapshot store
	// is unreachable", says why not (the checkpoints waiting for the
	// store would pass the server's bound). It is asked before anything
	// of the checkpoint is recorded.
	Admit(ctx context.Context, own int64) error
}
