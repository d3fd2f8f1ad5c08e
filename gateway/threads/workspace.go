package threads

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"warren/internal/diskquota"
)

// makeWorkspace creates the workspace folder root, a btrfs subvolume where
// the workspaces are on btrfs (so that it can get a quota), and registers
// its removal on undo, like makeLeaf; it says whether it made it. An
// existing folder stays as it is.
func makeWorkspace(undo *undoStack, root string) (made bool, err error) {
	parent := filepath.Dir(root)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return false, fmt.Errorf("create %s: %w", parent, err)
	}
	btrfs, err := diskquota.IsBtrfs(parent)
	if err != nil || !btrfs {
		return makeLeaf(undo, root, 0o755)
	}
	err = diskquota.MakeSubvolume(root)
	if errors.Is(err, os.ErrExist) {
		return makeLeaf(undo, root, 0o755)
	}
	if err != nil {
		return false, err
	}
	// An empty subvolume is removed like a folder.
	undo.pushFolder("remove "+root, func() error { return os.Remove(root) })
	return true, nil
}
