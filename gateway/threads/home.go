package threads

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"warren/gateway/call"
	"warren/internal/diskquota"
	"warren/jail"
	"warren/meta"
)

// Each thread has a home folder, its jail's HOME (package jail shows it
// at jail.Home), outside its workspace: what tools keep there (the caches
// of go build and npm) is not in the workspace's listing, git status or
// checkpoints. It sits beside the workspaces, in their folder:
//
//	<workspaces>/.homes/<tenant>/<thread>
//
// so it is on their filesystem, where the thread's quota group counts it
// with the workspace (package quota), it lives on the daemon's disk image
// with them, and a workspaces folder shared by servers shares the homes.
// No tenant's folder is ".homes": EncodeID never yields a name that
// begins with a dot.
//
// A home is made at the thread's bind, and at its mount at start, so a
// thread bound before homes existed gets one at its next mount; the
// jail's start makes it again if it went missing since. It is never
// checkpointed or restored, is kept across jails, closes and restarts,
// and goes with the thread's delete.

// HomesDir is the folder of the homes in the workspaces folder.
const HomesDir = ".homes"

// HomeOf returns the home folder of binding b: beside its workspace
// folder (RootOf), so a thread resumed in another host's workspaces
// folder keeps its home there too.
func (t *Threads) HomeOf(b meta.Binding) (string, error) {
	root, err := t.RootOf(b)
	if err != nil {
		return "", err
	}
	return homeOf(root, b.ThreadKey)
}

// homeOf is the home folder of thread k whose workspace folder is root,
// a workspace root (base/<tenant>/<thread>).
func homeOf(root string, k meta.ThreadKey) (string, error) {
	base := filepath.Dir(filepath.Dir(root))
	home, err := WorkspaceRoot(filepath.Join(base, HomesDir), k.Tenant, k.Thread)
	if err != nil {
		return "", fmt.Errorf("home folder: %w", err)
	}
	return home, nil
}

// Home returns the home folder of k's binding b for its jail, made if it
// is missing (a home removed by hand since the mount) and then given
// the thread's quota. The thread lock of k must be held.
func (t *Threads) Home(k meta.ThreadKey, b meta.Binding) (string, error) {
	root, err := t.RootOf(b)
	if err != nil {
		return "", err
	}
	home, made, err := makeHomeOf(nil, k, root)
	if err != nil {
		return "", fmt.Errorf("home of thread %s: %w", call.KeyName(k), err)
	}
	if made {
		if err := t.cfg.Quotas.Apply(k, root, home, b.Settings); err != nil {
			return "", err
		}
	}
	return home, nil
}

// makeHomeOf makes the home folder of thread k, whose workspace folder
// is root, if it is missing (makeHome), and returns it.
func makeHomeOf(undo *undoStack, k meta.ThreadKey, root string) (home string, made bool, err error) {
	if home, err = homeOf(root, k); err != nil {
		return "", false, err
	}
	made, err = makeHome(undo, home)
	return home, made, err
}

// makeHome makes the home folder home (base/.homes/<tenant>/<thread>) if
// it is missing, and says whether it made it. Each level is made with
// mkdirat in the one above it, opened without following a link, so a
// link in the way is refused rather than followed: ".homes" and the
// tenant's folder mode 0700, root's (only the daemon goes through them;
// the jail gets the home itself), the home a btrfs subvolume where the
// folder is on btrfs (for the thread's quota group), else a folder, mode
// 0700, given to the jail's user (jail.NobodyID). An existing home that
// is root's is given to the jail's user too (a start that stopped between
// the two steps); another owner's is left as it is. If undo is not nil,
// the home's removal is registered on it when it made it.
func makeHome(undo *undoStack, home string) (made bool, err error) {
	tenantDir := filepath.Dir(home)
	homes := filepath.Dir(tenantDir)
	// The workspaces folder is the daemon's own, made by it: followed.
	dir, err := os.Open(filepath.Dir(homes))
	if err != nil {
		return false, fmt.Errorf("create home %s: %w", home, err)
	}
	defer func() { dir.Close() }()
	for _, p := range []string{homes, tenantDir} {
		next, _, err := mkdirAt(dir, filepath.Base(p), func(fd int, name string) error { return unix.Mkdirat(fd, name, 0o700) })
		if err != nil {
			return false, fmt.Errorf("create home %s: %w", home, err)
		}
		dir.Close()
		dir = next
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(dir.Fd()), &st); err != nil {
		return false, fmt.Errorf("create home %s: statfs %s: %w", home, dir.Name(), err)
	}
	mk := func(fd int, name string) error { return unix.Mkdirat(fd, name, 0o700) }
	if st.Type == unix.BTRFS_SUPER_MAGIC {
		mk = func(_ int, name string) error {
			err := diskquota.MakeSubvolumeAt(dir, name)
			if errors.Is(err, os.ErrExist) {
				return unix.EEXIST
			}
			return err
		}
	}
	f, made, err := mkdirAt(dir, filepath.Base(home), mk)
	if err != nil {
		return false, fmt.Errorf("create home %s: %w", home, err)
	}
	defer f.Close()
	if made && undo != nil {
		// An empty subvolume is removed like a folder.
		undo.pushFolder("remove "+home, func() error { return os.Remove(home) })
	}
	var fst unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &fst); err != nil {
		return made, fmt.Errorf("create home %s: %w", home, err)
	}
	if made || fst.Uid == 0 {
		if err := unix.Fchown(int(f.Fd()), jail.NobodyID, jail.NobodyID); err != nil {
			return made, fmt.Errorf("give home %s to the jail's user: %w", home, err)
		}
	}
	if made {
		// A subvolume is made 0755 whatever the umask.
		if err := unix.Fchmod(int(f.Fd()), 0o700); err != nil {
			return made, fmt.Errorf("create home %s: %w", home, err)
		}
	}
	return made, nil
}

// mkdirAt makes the folder name in dir with mk, unless it exists, and
// opens it without following a link: a link, or anything but a folder,
// in its place is refused. It says whether mk made it.
func mkdirAt(dir *os.File, name string, mk func(fd int, name string) error) (*os.File, bool, error) {
	path := filepath.Join(dir.Name(), name)
	err := mk(int(dir.Fd()), name)
	made := err == nil
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return nil, false, fmt.Errorf("mkdir %s: %w", path, err)
	}
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		return nil, false, fmt.Errorf("%s is a link or not a folder: refused (%w)", path, err)
	}
	if err != nil {
		return nil, false, fmt.Errorf("open %s: %w", path, err)
	}
	return os.NewFile(uintptr(fd), path), made, nil
}
