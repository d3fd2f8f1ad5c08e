package threads

import (
	"context"
	"errors"
	"fmt"
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
	return removeTree(root, progress.Of(ctx))
}

// removeHome removes the home folder home like a workspace, telling
// no one (a delete's progress is its workspace's). The folders above it
// (HomesDir and the tenant's) are the daemon's, made without following
// links (makeHome); one that is a link now is refused, not followed. A
// link in the home's place is removed itself.
func removeHome(home string) error {
	for _, p := range []string{filepath.Dir(filepath.Dir(home)), filepath.Dir(home)} {
		fi, err := os.Lstat(p)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("%s is a link or not a folder: refused", p)
		}
	}
	return removeTree(home, func(progress.Frame) {})
}

// removeTree is removeWorkspace, telling report.
func removeTree(root string, report progress.Func) error {
	if fi, err := os.Lstat(root); err == nil && !fi.IsDir() {
		return os.Remove(root) // a link goes itself, never what it names
	}
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
