package api

import (
	"path/filepath"

	"warren/meta"
)

// DefaultTenant is the tenant of a thread whose client gave none.
const DefaultTenant = "default"

// MaxIDBytes bounds a tenant or thread id. Longer ids are refused rather
// than hashed: no client needs them, and they would bloat every log line.
const MaxIDBytes = 1024

// A page of GET /v1/threads holds at most ThreadsPageMax bindings, and
// ThreadsPageDefault when the request gives no limit: a listing costs the
// daemon the same however many threads it serves.
const (
	ThreadsPageDefault = 100
	ThreadsPageMax     = 1000
)

// DefaultSocket is the API socket of a daemon whose data folder is dataDir
// and that was given no socket path of its own.
func DefaultSocket(dataDir string) string { return filepath.Join(dataDir, "warren.sock") }

// BindRequest is the optional body of POST .../bind.
type BindRequest struct {
	// Settings, if given, replace the thread's settings.
	Settings *meta.Settings `json:"settings,omitempty"`
}

// ThreadInfo is a binding as the API shows it: the stored record plus what
// the daemon knows about its mount.
type ThreadInfo struct {
	meta.Binding
	// Mounted says whether the daemon serves the thread's mount now.
	Mounted bool `json:"mounted"`
	// Error is why the last attempt to mount the thread failed, while it is
	// not mounted. The next call that needs the thread tries again.
	Error string `json:"error,omitempty"`
	// Owner is the host that holds the thread's pin now, if a live host
	// does (only threads of daemons with a host id are pinned).
	Owner string `json:"owner,omitempty"`
}

// Answers of the thread calls.
type (
	// BindResponse answers POST .../bind.
	BindResponse struct {
		Binding   ThreadInfo `json:"binding"`
		MountPath string     `json:"mountPath"`
	}
	// ThreadResponse answers GET and POST .../close of one thread.
	ThreadResponse struct {
		Binding ThreadInfo `json:"binding"`
	}
	// ThreadsResponse answers GET /v1/threads: one page of bindings,
	// ordered by tenant then thread.
	ThreadsResponse struct {
		Bindings []ThreadInfo `json:"bindings"`
		// NextCursor, when set, is where the next page starts: pass it as
		// ?cursor= (with the same tenant) to read on. It is absent on the
		// last page. It is opaque: a client neither reads nor builds one.
		NextCursor string `json:"nextCursor,omitempty"`
	}
	// DeleteResponse answers DELETE of a thread.
	DeleteResponse struct {
		Deleted meta.ThreadKey `json:"deleted"`
	}
	// HostsResponse answers GET /v1/hosts.
	HostsResponse struct {
		Hosts []meta.Host `json:"hosts"`
	}
)

// MountRequest asks for an inspection mount of a thread's workspace.
type MountRequest struct {
	Tenant string `json:"tenant"`
	Thread string `json:"thread"`
	// Path is the folder to mount on: absolute, existing, empty, owned by
	// the caller, not a mount already and not inside the data folder.
	Path string `json:"path"`
	// Writable allows writes; inspection mounts are read-only otherwise.
	Writable bool `json:"writable"`
}

// MountInfo is an inspection mount as the API shows it.
type MountInfo struct {
	meta.InspectionMount
	Mounted bool   `json:"mounted"`
	Error   string `json:"error,omitempty"`
}

// Answers of the inspection mount calls.
type (
	// MountResponse answers POST /v1/mounts.
	MountResponse struct {
		Mount MountInfo `json:"mount"`
	}
	// MountsResponse answers GET /v1/mounts.
	MountsResponse struct {
		Mounts []MountInfo `json:"mounts"`
	}
	// UnmountResponse answers DELETE /v1/mounts.
	UnmountResponse struct {
		Unmounted string `json:"unmounted"`
		// InUse says the mount left the tree but still serves processes
		// that use it, until they let go.
		InUse bool `json:"inUse,omitempty"`
	}
)

// Usage is what one thread uses on the server that serves it
// (GET .../usage). The jail's figures are its cgroup's, all its processes
// together, and zero while no jail runs for the thread (Jail false).
type Usage struct {
	Tenant string `json:"tenant"`
	Thread string `json:"thread"`
	// Jail says whether a jail runs for the thread now.
	Jail bool `json:"jail"`
	// CPUSeconds is the CPU time the jail's processes used since it
	// started, ended ones too.
	CPUSeconds float64 `json:"cpuSeconds"`
	// MemoryBytes is what the jail holds now (page cache included, as its
	// limit counts it); MemoryPeakBytes the most it held.
	MemoryBytes     int64 `json:"memoryBytes"`
	MemoryPeakBytes int64 `json:"memoryPeakBytes"`
	// Processes counts the jail's processes and threads now, its init
	// included.
	Processes int `json:"processes"`
	// DiskBytes is the size of the workspace's files, DiskFiles the
	// entries in it (files, folders, links); HomeBytes and HomeFiles the
	// same of the thread's home folder (the jail's HOME, outside the
	// workspace: tools' caches). DiskQuotaBytes is the thread's quota, 0
	// for none, which bounds the workspace and the home together.
	DiskBytes      int64 `json:"diskBytes"`
	DiskFiles      int64 `json:"diskFiles"`
	HomeBytes      int64 `json:"homeBytes"`
	HomeFiles      int64 `json:"homeFiles"`
	DiskQuotaBytes int64 `json:"diskQuotaBytes"`
	// SnapshotBytes is what the thread's kept checkpoints reference (the
	// sum of their ownBytes; shared content counts for each thread that
	// holds it), Checkpoints how many it keeps; SnapshotQuotaBytes its
	// snapshot quota, 0 for none.
	SnapshotBytes      int64 `json:"snapshotBytes"`
	SnapshotQuotaBytes int64 `json:"snapshotQuotaBytes"`
	Checkpoints        int   `json:"checkpoints"`
	// JobsRunning counts its background jobs running here; Jobs those
	// recorded (running and ended).
	JobsRunning int `json:"jobsRunning"`
	Jobs        int `json:"jobs"`
	// FUSERequests counts the requests its mount answered since it was
	// mounted (0 while it is not).
	FUSERequests uint64 `json:"fuseRequests"`
	// Image is the image the thread's jail runs on ("" for the host's
	// folders) and ImageDigest its pin; ImageBytes its unpacked size, on
	// disk once for every thread that uses it; ImageStoreBytes the size
	// of the server's whole image store.
	Image           string `json:"image,omitempty"`
	ImageDigest     string `json:"imageDigest,omitempty"`
	ImageBytes      int64  `json:"imageBytes,omitempty"`
	ImageStoreBytes int64  `json:"imageStoreBytes"`
}

// UsageResponse answers GET .../usage.
type UsageResponse struct {
	Usage Usage `json:"usage"`
}
