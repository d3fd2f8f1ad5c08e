package inspect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"warren/fs"
	"warren/meta"
)

// Restore serves again, at the daemon's start, every inspection mount
// the store records. It runs before the API serves, so it takes no
// thread locks. A record whose thread was deleted, or whose folder no
// longer passes the checks a new mount must pass, is dropped (logged
// with the reason); a mount that fails otherwise is logged and kept, with
// its error, for List, and Unmount clears it. It returns how many it
// mounted and how many failed; err is only a failure to list the records
// (nothing is then served).
func (in *Inspections) Restore(ctx context.Context) (mounted, failed int, err error) {
	ms, err := in.store.ListInspectionMounts(ctx)
	if err != nil {
		return 0, 0, err
	}
	for _, m := range ms {
		mount, err := in.restoreInspection(ctx, m)
		var drop string
		switch {
		case errors.Is(err, meta.ErrNotFound):
			// Its thread was deleted while the mount could not be taken
			// down; nothing is left to serve.
			drop = "its thread was deleted"
		case errors.Is(err, errFolderRefused):
			// The folder no longer passes the checks a new mount must
			// pass (a link swapped into its path, another owner, files
			// in it): it is not covered, and not tried again.
			drop = "its folder no longer passes the checks"
		}
		if drop != "" {
			in.log.Warn("restore: dropping inspection mount: "+drop, "tenant", m.Tenant, "thread", m.Thread, "path", m.Path, "uid", m.Owner, "error", err)
			if err := in.store.DeleteInspectionMount(ctx, m.Path); err != nil {
				in.log.Error("restore: forget inspection mount", "path", m.Path, "error", err)
			}
			continue
		}
		in.set.put(m.Path, &inspectionMount{key: m.ThreadKey, mount: mount, err: err})
		if err != nil {
			failed++
			in.log.Error("restore: inspection mount", "tenant", m.Tenant, "thread", m.Thread, "path", m.Path, "error", err)
			continue
		}
		mounted++
	}
	return mounted, failed, nil
}

// errFolderRefused marks a recorded inspection folder that no longer
// passes the checks of a new mount.
var errFolderRefused = errors.New("inspection folder refused")

// restoreInspection serves an inspection mount again, with the resolution
// and every check of a new one (openInspectionDir), for the uid it was
// made for. It returns an error matching meta.ErrNotFound when the thread
// has no binding any more, and errFolderRefused when the folder does not
// pass the checks.
func (in *Inspections) restoreInspection(ctx context.Context, m meta.InspectionMount) (io.Closer, error) {
	b, err := in.store.GetBinding(ctx, m.ThreadKey)
	if err != nil {
		return nil, fmt.Errorf("read binding: %w", err)
	}
	if b.State == meta.StateDeleting {
		// Its delete failed again at this start: never served.
		DetachStale(m.Path)
		return nil, fmt.Errorf("%w: thread is being deleted", meta.ErrNotFound)
	}
	// What a crashed run left there, reached without following links
	// and detached through its own descriptor.
	if err := DetachStale(m.Path); err != nil {
		return nil, err
	}
	dirFd, path, err := in.openInspectionDir(m.Path, m.Owner)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errFolderRefused, err)
	}
	defer unix.Close(dirFd)
	root, err := in.threads.RootOf(b)
	if err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(root); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("workspace %s is missing or not a folder (%v)", root, err)
	}
	return in.threads.Mount(ctx, m.ThreadKey, root, path, !m.Writable, &fs.Target{Fd: dirFd})
}
