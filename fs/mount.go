package fs

import (
	"context"
	"errors"

	"github.com/hashicorp/go-hclog"
)

// Options configures one mount.
type Options struct {
	// Name labels the mount in /proc/mounts ("warren:<Name>") and in logs,
	// e.g. "tenant/thread".
	Name string
	// ReadOnly refuses every modifying operation with EROFS.
	ReadOnly bool
	// Logger receives structured logs; nil means hclog.NewNullLogger().
	Logger hclog.Logger
	// OnRefusal, if set, is called for every refused escape attempt, after
	// it is logged. It must not block.
	OnRefusal func(Refusal)
	// NoPassthrough turns off FUSE passthrough even where the kernel offers it.
	NoPassthrough bool
}

// Refusal describes an operation the boundary refused.
type Refusal struct {
	Mount  string // Options.Name
	Op     string // "symlink", "readlink", "lookup", "link", ...
	Path   string // path inside the root, "/"-separated, starting with "/"
	Target string // link target, when there is one
	Reason string
}

// Mount is a served workspace mount. Call Close when finished.
type Mount struct {
	mountpoint string
}

// Serve mounts backing at mountpoint and serves it until Close.
func Serve(ctx context.Context, backing, mountpoint string, opts Options) (*Mount, error) {
	return nil, errors.New("fs: not implemented yet")
}

// Mountpoint returns where the mount is.
func (m *Mount) Mountpoint() string { return m.mountpoint }

// Close unmounts and waits for the server to stop.
func (m *Mount) Close() error { return nil }

// DetachStale lazily unmounts whatever is mounted at mountpoint (a mount
// left by a crashed daemon answers ENOTCONN). It is not an error if nothing
// is mounted there.
func DetachStale(mountpoint string) error { return nil }
