package api

// Version is what build a program is: the answer of GET /v1/version (the
// daemon's), and what `warren version` prints of the client and of the
// daemon.
type Version struct {
	// Version is the release, as `git describe --always --dirty` gave it
	// when make build stamped it; "devel" for an unstamped build.
	Version string `json:"version"`
	// Revision is the commit's short hash, as `git rev-parse --short HEAD`
	// gives it; Modified says the tree had uncommitted changes.
	Revision string `json:"revision,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	// Date is the commit's time, RFC 3339.
	Date      string `json:"date,omitempty"`
	GoVersion string `json:"goVersion"`
	// Kernel is what the daemon's kernel offers it (only the daemon's
	// answer has it).
	Kernel []KernelFeature `json:"kernel,omitempty"`
}

// KernelFeature is one feature of the kernel: FUSE passthrough, FUSE over
// io_uring, Landlock, cgroups.
type KernelFeature struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}
