// Package meta is the interface of warren's metadata store: the durable
// record of which threads are bound, where their workspaces live and which
// host serves them, their background jobs, and the hosts' leases and the
// pins they hold on threads. It holds the Store interface, the records it
// keeps and the errors it returns, and imports only the standard library,
// so what merely uses a store links no engine.
//
// The engines live in packages of their own: warren/meta/badger, embedded,
// the default for one server; and warren/meta/etcd, for several servers
// that share one view. Both keep the same key layout (meta/internal/keys,
// internal: it is how they store records, not part of the interface).
// warren/meta/metatest is the conformance suite that each engine's tests
// run: the promises below are checked there, once, for both.
//
// A thread's checkpoint history (History: its checkpoints, its undo and
// redo position, the journal of a restore under way) is one record, so a
// checkpoint, an undo or a restore moves it in one compare-and-set. Its
// size is bounded (MaxHistoryBytes); Settings.Checkpoints says how many
// checkpoints a thread keeps.
//
// The Store interface is small on purpose. Every write is a compare-and-set
// on a record's Revision, so two servers (or two goroutines) racing to bind
// one thread cannot both win: the loser gets ErrConflict or ErrExists and
// reads again.
//
// Errors: lookups of missing records return an error matching ErrNotFound;
// failed compare-and-sets return ErrExists or ErrConflict; a record too
// large to store returns ErrTooLarge; a write the Badger store refuses on
// a nearly full disk returns ErrNoSpace (reads go on; see
// warren/meta/badger). Callers branch with errors.Is.
package meta

import (
	"context"
	"errors"
	"time"
)

// Sentinel errors. Callers branch on them with errors.Is.
var (
	// ErrNotFound means no record exists under the key.
	ErrNotFound = errors.New("meta: not found")
	// ErrExists means a create found a record already there.
	ErrExists = errors.New("meta: already exists")
	// ErrConflict means an update or delete saw a different revision than
	// the caller read: someone else wrote the record in between.
	ErrConflict = errors.New("meta: revision conflict")
	// ErrClosed means the store was used after Close.
	ErrClosed = errors.New("meta: store closed")
	// ErrUnavailable means the store did not answer in time (a cluster
	// electing a leader, a member gone). A write that failed so may still
	// have been applied: read again before writing again.
	ErrUnavailable = errors.New("meta: store unavailable")
	// ErrNoSpace means the disk of an embedded store has too little room
	// left for it to write safely (see badger.MinFreeBytes); it reads on.
	// The write was not applied.
	ErrNoSpace = errors.New("meta: no space left for the metadata store")
	// ErrTooLarge means a record's encoding is over its kind's limit
	// (MaxHistoryBytes). The write was not applied.
	ErrTooLarge = errors.New("meta: record too large")
)

// Kind says what backs a thread's workspace.
type Kind string

// KindHost is a folder on the disk of one host.
const KindHost Kind = "host"

// State is where a binding is in its life.
type State string

const (
	// StateBound means the workspace is mounted and serving.
	StateBound State = "bound"
	// StateClosed means the thread was closed: its folder and record stay,
	// its mount is gone; the next call that needs it binds it again.
	StateClosed State = "closed"
	// StateGone means the host that took the thread over could not reach
	// its folder, and was configured not to start a fresh one: every call
	// fails, naming the folder and the host it was on.
	StateGone State = "gone"
	// StateDeleting means a delete of the thread started: it is recorded
	// before anything is removed, so a delete cut short (a crash, a failed
	// unmount) is never served half done. Every call but another delete
	// answers as gone; the next delete, or the next start of the host,
	// finishes it.
	StateDeleting State = "deleting"
)

// ThreadKey names a thread. Tenant and Thread are the client's ids as given
// (after the tenant default is applied); they are never used as paths. They
// may hold any bytes ("/", "..", NUL, empty, not UTF-8): a store keeps every
// pair apart and gives it back exactly.
type ThreadKey struct {
	Tenant string `json:"tenant"`
	Thread string `json:"thread"`
}

// Binding is the record of one thread's workspace.
type Binding struct {
	ThreadKey
	Kind      Kind      `json:"kind"`
	HostID    string    `json:"hostId,omitempty"`
	Root      string    `json:"root"`      // backing folder on HostID's disk
	MountPath string    `json:"mountPath"` // where the FUSE mount serves Root
	BoundAt   time.Time `json:"boundAt"`
	State     State     `json:"state"`
	ClosedAt  time.Time `json:"closedAt,omitzero"`
	// Settings configure the thread's jail and jobs.
	Settings Settings `json:"settings,omitzero"`

	// Revision is set by the store on every read and write. Updates and
	// deletes must pass the revision they read; zero is never a valid
	// revision of a stored record. Each write to the store gets a revision
	// above every earlier one and revisions are never reused, so a revision
	// read before a record was deleted never matches the record created
	// after it.
	Revision uint64 `json:"revision"`
}

// Settings configure one thread: its jail's network and limits, the
// variables its commands get and how many jobs it may run at once. A zero
// field means the gateway's default.
type Settings struct {
	// Network is "none" (a network of the jail's own, loopback only),
	// "egress" (its own, linked to the host and NATed out under Egress's
	// rules) or "host".
	Network string `json:"network,omitempty"`
	// Egress is what a jail in network "egress" may reach; nil allows
	// every public address.
	Egress *Egress `json:"egress,omitempty"`
	// EgressBytesPerSecond shapes an egress jail's traffic, each way;
	// zero is no bound.
	EgressBytesPerSecond int64 `json:"egressBytesPerSecond,omitempty"`
	// MaxConnections bounds an egress jail's open connections; zero
	// means the gateway's default (1,024).
	MaxConnections int `json:"maxConnections,omitempty"`
	// Image is the OCI image whose filesystem is the jail's root, as a
	// normalised reference ("docker.io/library/node:22"); zero means the
	// gateway's default image, or the host-folder root without one.
	// ImageDigest pins it: the digest of its manifest, which the gateway
	// sets at the bind that names the image, so that the thread runs on
	// that very image here and on any server that takes it over.
	Image       string `json:"image,omitempty"`
	ImageDigest string `json:"imageDigest,omitempty"`
	// MemoryBytes and MaxProcs bound the jail's processes together.
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
	MaxProcs    int   `json:"maxProcs,omitempty"`
	// CPUMillis bounds the CPU time of the jail's processes together, in
	// thousandths of a CPU (500 is half of one CPU's time).
	CPUMillis int `json:"cpuMillis,omitempty"`
	// Env are extra variables for every command of the thread; a call's
	// own variables win over them.
	Env map[string]string `json:"env,omitempty"`
	// MaxJobs bounds the background jobs that run at once.
	MaxJobs int `json:"maxJobs,omitempty"`
	// DiskBytes bounds the bytes the thread's workspace holds; the
	// filesystem refuses writes past it (EDQUOT).
	DiskBytes int64 `json:"diskBytes,omitempty"`
	// SnapshotBytes bounds the bytes the thread's kept checkpoints
	// reference (Checkpoint.OwnBytes summed); zero means the gateway's
	// default, which is the thread's disk quota where it has one.
	SnapshotBytes int64 `json:"snapshotBytes,omitempty"`
	// Checkpoints is how many checkpoints of the thread are kept (the
	// oldest go first); zero means the gateway's default.
	Checkpoints int `json:"checkpoints,omitempty"`
	// JailIdleSeconds stops the thread's jail once no command or job ran
	// in it for so long, giving back its memory and cgroup; the thread
	// stays bound and mounted, and its next command starts a new jail.
	// CloseIdleSeconds closes the thread itself (its mount goes, its
	// folder and record stay) once nothing used it for so long. -1 means
	// never, zero the gateway's default.
	JailIdleSeconds  int64 `json:"jailIdleSeconds,omitempty"`
	CloseIdleSeconds int64 `json:"closeIdleSeconds,omitempty"`
}

// Egress is a thread's egress policy: rules are CIDRs, host names and
// wildcard domains ("*.npmjs.org": the names under it). A deny rule wins
// over an allow rule. Default is "allow" (every public address but the
// denied; denied names do not resolve) or "deny" (only the allowed
// ranges, and the addresses the jail resolved for an allowed name, for the
// answer's lifetime); "" is "allow".
type Egress struct {
	Default string   `json:"default,omitempty"`
	Allow   []string `json:"allow,omitempty"`
	Deny    []string `json:"deny,omitempty"`
}

// Job records a background job of a thread. Jobs are numbered per thread
// (NextJobSeq); the record is written when the job starts and again when
// it ends, by the host that runs it.
type Job struct {
	ThreadKey
	// Seq is the job's number in its thread; the job's id is "bash-<Seq>".
	Seq   uint64 `json:"seq"`
	Label string `json:"label"` // the command
	User  string `json:"user,omitempty"`
	// HostID is the host that runs it ("" for a gateway without a host
	// id), and Instance the gateway process there, so a restarted host
	// knows which jobs a former run of it left behind.
	HostID    string `json:"hostId,omitempty"`
	Instance  string `json:"instance,omitempty"`
	BackendID string `json:"backendId,omitempty"` // its process id on that host
	// Machine and Cgroup say where its processes are: a gateway on the
	// same machine can stop them after the thread moved to it.
	Machine   string    `json:"machine,omitempty"`
	Cgroup    string    `json:"cgroup,omitempty"`
	StartedAt time.Time `json:"startedAt"`
	// Running is true from its start until its end is recorded.
	Running  bool      `json:"running"`
	ExitCode *int      `json:"exitCode,omitempty"`
	EndedAt  time.Time `json:"endedAt,omitzero"`
	// Note says how the job ended when its host could not record it
	// itself (a restart, a move to another host), or why it ended as it
	// did (Reason).
	Note string `json:"note,omitempty"`
	// Reason is why it ended as it did, when the gateway or the kernel
	// ended it: one of api's Reason* codes ("timeout", "oom", "pids",
	// "reclaimed", "killed", "no-network"); "" for a job that ended by
	// itself.
	Reason string `json:"reason,omitempty"`

	Revision uint64 `json:"revision"`
}

// InspectionMount records a mount that the gateway serves for a person to
// look at a thread's workspace (warren mount). It is kept so a restarted
// gateway can serve it again, or clean it up.
type InspectionMount struct {
	ThreadKey
	Path     string `json:"path"`
	Writable bool   `json:"writable"`
	// Owner is the uid the mount was made for (the API's peer), whose
	// folder Path must still be when the mount is made again at a
	// start; 0 is root, whose mounts may cover any empty folder.
	Owner    uint32    `json:"owner"`
	MadeAt   time.Time `json:"madeAt"`
	Revision uint64    `json:"revision"`
}

// MaxHistoryBytes bounds a History's JSON encoding (encoding/json, with
// Revision zero): PutHistory refuses a larger one with ErrTooLarge. A
// history is one value, read and written whole; this keeps it within one
// etcd request (--max-request-bytes, 1.5 MiB by default).
const MaxHistoryBytes = 1 << 20

// Checkpoint is one recorded state of a thread's workspace; its content
// lives in the tenant's snapshot repository under Tree.
type Checkpoint struct {
	ID    string `json:"id"` // "cp-<Seq>"
	Seq   uint64 `json:"seq"`
	Label string `json:"label,omitempty"`
	Turn  int    `json:"turn,omitempty"`
	Run   string `json:"run,omitempty"`
	Tree  string `json:"tree"` // the root tree's hash in the repository, hex
	// Parent is the checkpoint the workspace was at when this one was
	// taken.
	Parent string `json:"parent,omitempty"`
	// Auto marks a checkpoint taken by an undo or a revert to keep the
	// state it replaced.
	Auto      bool      `json:"auto,omitempty"`
	HostID    string    `json:"hostId,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	Files     int64     `json:"files"` // regular files and links in the tree
	Bytes     int64     `json:"bytes"` // their bytes
	// RefBytes is the data bytes the tree references (a sparse file's
	// data, not its holes). OwnBytes is those of them that its base,
	// OwnBase (a kept checkpoint of the thread, its parent when it was
	// taken; "" for none, when OwnBytes is RefBytes), does not hold at the
	// same path with the same content. A thread's snapshot bytes are the
	// sum of OwnBytes over its kept checkpoints: every byte they
	// reference, counted at least once (more where content moves or
	// comes back), whatever other threads hold. When a checkpoint's base
	// is dropped, OwnBytes is counted again against the base's own base.
	// Counted is false in records made before snapshot quotas, whose
	// RefBytes and OwnBytes are not known yet.
	RefBytes int64  `json:"refBytes"`
	OwnBytes int64  `json:"ownBytes"`
	OwnBase  string `json:"ownBase,omitempty"`
	Counted  bool   `json:"counted,omitempty"`
	// Replicated says the tree is in the snapshot store other servers
	// read (its manifest written: every object of it there); false while
	// its objects are only in the local repository, and always on a
	// server without a store.
	Replicated bool `json:"replicated"`
}

// Restore is the journal of a restore under way: written before the
// workspace's first file changes, cleared once the last one did; for a
// restore that could not finish, once the workspace was put back (it is
// then kept, closed, as History.FailedRestore).
type Restore struct {
	Op   string `json:"op"`   // "undo", "redo", "revert", "fork"
	To   string `json:"to"`   // the checkpoint restored
	Tree string `json:"tree"` // its tree
	// Head and Redo are what History.Head and History.Redo become once
	// the restore finished.
	Head      string    `json:"head"`
	Redo      []string  `json:"redo,omitempty"`
	HostID    string    `json:"hostId,omitempty"`
	StartedAt time.Time `json:"startedAt"`
	// From is the tree the workspace held when the restore began (the
	// zero hash for an empty one): what a restore that cannot finish
	// puts back. Empty in journals written before it was kept: such a
	// restore, finished at a start, is put back to the workspace as the
	// start found it.
	From string `json:"from,omitempty"`
	// Failed is set once the restore failed (over a quota, a full disk,
	// an object missing or corrupt), with the reason: the workspace is
	// being put back to From. A restart that finds it finishes putting
	// back, not the restore.
	Failed string `json:"failed,omitempty"`
	// EndedAt is when a failed restore ended (History.FailedRestore).
	EndedAt time.Time `json:"endedAt,omitzero"`
}

// History is a thread's checkpoints and its place among them: one record
// per thread, written whole by each change (PutHistory), so a checkpoint
// and the move of Head are one compare-and-set.
type History struct {
	ThreadKey
	NextSeq     uint64       `json:"nextSeq"`     // the Seq of the next checkpoint
	Checkpoints []Checkpoint `json:"checkpoints"` // oldest first
	// Head is the checkpoint the workspace was last made or restored at.
	Head string `json:"head,omitempty"`
	// Redo are the undone checkpoints, the next redo last.
	Redo      []string `json:"redo,omitempty"`
	Restoring *Restore `json:"restoring,omitempty"`
	// FailedRestore is the journal of the last restore that could not
	// finish, closed with its reason (Failed) once the workspace was put
	// back: kept for the operator, never resumed.
	FailedRestore *Restore `json:"failedRestore,omitempty"`

	// Revision is set by the store on every read and write, as
	// Binding.Revision is: a replace must pass the revision it read.
	Revision uint64 `json:"revision"`
}

// LeaseID names one grant of a host's lease. Zero is never a lease.
type LeaseID int64

// ErrLeaseLost means a host's lease expired: its pins are gone.
var ErrLeaseLost = errors.New("meta: lease lost")

// ErrPinned means another host holds a live pin on the thread.
var ErrPinned = errors.New("meta: pinned to another host")

// Host is a server that keeps its lease with heartbeats.
type Host struct {
	ID string `json:"id"`
	// LastBeat is the store's time of its last heartbeat.
	LastBeat time.Time `json:"lastBeat"`
	// TTL is how long its lease lasts after a heartbeat.
	TTL time.Duration `json:"ttl"`
	// Alive says whether its lease holds now.
	Alive bool `json:"alive"`
}

// Pin says which host owns a thread: the one whose disk holds its folder.
// It lasts while that host's lease does.
type Pin struct {
	ThreadKey
	HostID string  `json:"hostId"`
	Lease  LeaseID `json:"lease"`
}

// Claim is a record that hosts take in turn, for work one server of
// several should do at a time (the collection of the snapshot store):
// Holder holds it until Until, by the hosts' clocks. Hosts read it and
// replace it with compare-and-set on Revision, so two never both take
// it from the same state; the work must stay safe if clocks disagree and
// two do it at once (a claim orders work, it does not fence it).
type Claim struct {
	Name   string    `json:"name"`
	Holder string    `json:"holder,omitempty"`
	Until  time.Time `json:"until"`
	// Done is when the work was last done to its end, by its holder's
	// clock: what a host asks before it takes the claim for work due
	// every so often.
	Done time.Time `json:"done,omitzero"`

	// Revision is set by the store on every read and write, as
	// Binding.Revision is.
	Revision uint64 `json:"revision"`
}

// Store is the metadata store. Implementations are safe for concurrent use.
type Store interface {
	// CreateBinding stores b if no binding exists for its key; otherwise it
	// returns ErrExists. It returns b with its new Revision.
	CreateBinding(ctx context.Context, b Binding) (Binding, error)
	// UpdateBinding replaces the binding if its stored revision equals
	// b.Revision; otherwise ErrConflict (or ErrNotFound if it is gone).
	UpdateBinding(ctx context.Context, b Binding) (Binding, error)
	// GetBinding returns the binding for k, or ErrNotFound.
	GetBinding(ctx context.Context, k ThreadKey) (Binding, error)
	// ListBindings returns every binding, ordered by tenant then thread.
	ListBindings(ctx context.Context) ([]Binding, error)
	// ListBindingsPage returns at most limit bindings (limit > 0), ordered
	// by tenant then thread: those of tenant only when tenant is not nil,
	// and only those after the key after when it is not nil (after need not
	// be stored: the page starts at the first key above it). more says
	// whether bindings follow the last one returned; a caller pages by
	// passing that last key as the next after. It reads limit records
	// (and the key of one more), however many the store holds. Pages are
	// not one snapshot: a binding created or deleted between two pages is
	// listed or not, but every binding stored throughout is listed once.
	ListBindingsPage(ctx context.Context, tenant *string, after *ThreadKey, limit int) (page []Binding, more bool, err error)
	// DeleteBinding removes the binding if its revision equals rev;
	// ErrConflict if it changed, ErrNotFound if it is gone.
	DeleteBinding(ctx context.Context, k ThreadKey, rev uint64) error

	// PutInspectionMount creates or replaces the record for m.Path.
	PutInspectionMount(ctx context.Context, m InspectionMount) (InspectionMount, error)
	// ListInspectionMounts returns every inspection mount, ordered by path.
	ListInspectionMounts(ctx context.Context) ([]InspectionMount, error)
	// DeleteInspectionMount removes the record for path; deleting a
	// missing record is not an error.
	DeleteInspectionMount(ctx context.Context, path string) error

	// NextJobSeq returns the next job number of thread k: 1 first, then
	// one more on each call, never the same twice for a thread, across
	// restarts and hosts (until DeleteJobs).
	NextJobSeq(ctx context.Context, k ThreadKey) (uint64, error)
	// CreateJob stores j; ErrExists if (j.ThreadKey, j.Seq) has a record.
	CreateJob(ctx context.Context, j Job) (Job, error)
	// UpdateJob replaces the job if its stored revision equals j.Revision;
	// otherwise ErrConflict (or ErrNotFound if it is gone).
	UpdateJob(ctx context.Context, j Job) (Job, error)
	// GetJob returns job seq of thread k, or ErrNotFound.
	GetJob(ctx context.Context, k ThreadKey, seq uint64) (Job, error)
	// ListJobs returns the jobs of thread k, ordered by Seq.
	ListJobs(ctx context.Context, k ThreadKey) ([]Job, error)
	// DeleteJobs removes every job record of thread k and its counter.
	DeleteJobs(ctx context.Context, k ThreadKey) error

	// Heartbeat renews host's lease, or grants a new one when lease is
	// zero, for ttl: the host counts as alive, and its pins hold, until
	// ttl passes without a heartbeat. A non-zero lease that expired is
	// not renewed: ErrLeaseLost, and with it every pin made under it;
	// the host must ask again with lease zero, and pin again.
	Heartbeat(ctx context.Context, host string, lease LeaseID, ttl time.Duration) (LeaseID, error)
	// ListHosts returns every host that ever sent a heartbeat, ordered by
	// id, with Alive set as the store sees it now.
	ListHosts(ctx context.Context) ([]Host, error)
	// Pin makes host, under its live lease, the owner of thread k, unless
	// another host holds a live pin on it: then it returns that pin and
	// ErrPinned. A pin of host itself under another lease (a former run
	// of the host) is taken over. A pin lasts as long as its lease.
	Pin(ctx context.Context, k ThreadKey, host string, lease LeaseID) (Pin, error)
	// GetPin returns the live pin of thread k, or ErrNotFound.
	GetPin(ctx context.Context, k ThreadKey) (Pin, error)
	// ListPins returns every live pin, ordered by tenant then thread.
	ListPins(ctx context.Context) ([]Pin, error)
	// Unpin removes host's pin of thread k; a missing pin, or another
	// host's, is left as it is and is not an error.
	Unpin(ctx context.Context, k ThreadKey, host string) error

	// GetHistory returns thread k's checkpoint history, or ErrNotFound.
	GetHistory(ctx context.Context, k ThreadKey) (History, error)
	// PutHistory stores h: it creates it when h.Revision is zero (ErrExists
	// if the thread has one), else replaces it if the stored revision equals
	// h.Revision (ErrConflict if it changed, ErrNotFound if it is gone). It
	// returns h with its new Revision. A history whose encoding exceeds
	// MaxHistoryBytes is refused with ErrTooLarge and nothing is written.
	PutHistory(ctx context.Context, h History) (History, error)
	// DeleteHistory removes thread k's history; a missing one is not an error.
	DeleteHistory(ctx context.Context, k ThreadKey) error
	// ListHistories returns the histories of every thread of tenant, ordered
	// by thread (for the repository's garbage collection).
	ListHistories(ctx context.Context, tenant string) ([]History, error)

	// GetClaim returns the claim named name, or ErrNotFound.
	GetClaim(ctx context.Context, name string) (Claim, error)
	// PutClaim stores c: it creates it when c.Revision is zero (ErrExists
	// if there is one), else replaces it if the stored revision equals
	// c.Revision (ErrConflict if it changed). It returns c with its new
	// Revision.
	PutClaim(ctx context.Context, c Claim) (Claim, error)

	// Close releases the store. Calls after Close return ErrClosed.
	Close() error
}
