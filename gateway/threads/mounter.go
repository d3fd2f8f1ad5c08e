package threads

import (
	"context"
	"io"

	"warren/fs"
)

// Mounter serves a backing folder at a mount point. The gateway owns the
// returned closer: Close unmounts and waits until serving stopped.
type Mounter interface {
	Mount(ctx context.Context, backing, mountpoint string, opts fs.Options) (io.Closer, error)
	// DetachStale lazily unmounts whatever is left at mountpoint by a
	// crashed daemon; nothing mounted there is not an error.
	DetachStale(mountpoint string) error
}

// FUSEMounter mounts with package fs: the real workspace filesystem.
// With a pool, the threads' mounts at their paths share its connections
// (fs.Pool); an inspection mount (onto a Target) or one over io_uring
// has a connection of its own.
type FUSEMounter struct{ Pool *fs.Pool }

var _ Mounter = FUSEMounter{}

// Mount implements Mounter.
func (fm FUSEMounter) Mount(ctx context.Context, backing, mountpoint string, opts fs.Options) (io.Closer, error) {
	var m *fs.Mount
	var err error
	if fm.Pool != nil && opts.Target == nil && (opts.Transport == "" || opts.Transport == fs.TransportClassic) {
		m, err = fm.Pool.Serve(ctx, backing, mountpoint, opts)
	} else {
		m, err = fs.Serve(ctx, backing, mountpoint, opts)
	}
	if err != nil {
		// A nil *fs.Mount in an io.Closer would not compare equal to nil.
		return nil, err
	}
	return m, nil
}

// DetachStale implements Mounter.
func (FUSEMounter) DetachStale(mountpoint string) error { return fs.DetachStale(mountpoint) }
