package threads

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	"warren/internal/progress"
)

// PhaseRemove is the phase a delete reports its progress in (package
// progress): the entries of the workspace's top folder removed, of all
// of them.
const PhaseRemove = "remove"

// removeWorkspace removes the workspace folder root and everything in
// it, one entry of its top folder after the other, telling ctx's
// progress.Func after each. Each entry goes with os.RemoveAll of
// root/name: it opens root and works fd-relative from there without
// following links, so a link planted in the workspace makes it remove
// nothing outside (root itself is the daemon's own path). A missing root
// is not an error.
func removeWorkspace(ctx context.Context, root string) error {
	report := progress.Of(ctx)
	f, err := os.Open(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return os.RemoveAll(root) // not a folder, or unreadable: as before
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return os.RemoveAll(root) // not a folder, or unreadable: as before
	}
	total := int64(len(names))
	for i, name := range names {
		if err := os.RemoveAll(filepath.Join(root, name)); err != nil {
			return err
		}
		report(progress.Frame{Done: int64(i + 1), Total: total, Phase: PhaseRemove})
	}
	return os.RemoveAll(root)
}
