package jail

import (
	"fmt"
	"os"
	"syscall"
)

// GiveWorkspace makes the workspace folder root its jail's user's
// (NobodyID), unless it is someone's other than root's already: a
// workspace made by the daemon, and what its file API makes in it before
// the first command (a new entry takes its folder's owner), are then the
// commands' to change. A thread's home folder (Config.Home) is given the
// same way.
func GiveWorkspace(root string) error {
	var st syscall.Stat_t
	if err := syscall.Lstat(root, &st); err != nil {
		return fmt.Errorf("give the workspace to its user: %w", err)
	}
	if st.Uid != 0 {
		return nil
	}
	if err := os.Lchown(root, NobodyID, NobodyID); err != nil {
		return fmt.Errorf("give the workspace to its user: %w", err)
	}
	return nil
}
