package diskquota

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A thread writes in two subvolumes, its workspace and its home, and its
// quota bounds the two together: their quota groups (0/<id> each) are the
// members of the thread's group, ThreadGroup, which has the limit. Btrfs
// counts a group's referenced bytes once however many of its members
// reference them, and lets a group have several parents: each subvolume
// is a member of its thread's group and of Group, the reserve's, at once
// (measured on Linux 6.18: both assignments are taken, and a write into
// either subvolume past the thread's group's limit gets EDQUOT).
//
// The thread's group is of level 2, not 1, because its number comes from
// its workspace's subvolume id, and a level-1 group of that number would
// be Group itself for the subvolume 30561: ids climb with every
// subvolume made, so a busy filesystem gets there. A level-2 group may
// hold level-0 groups directly, and Group stays as it was.
//
// The kernel adds a member's bytes to a new parent at once when they are
// all the member's own (exclusive = referenced), as they are for an empty
// home, and for a workspace that shares no extent with another
// subvolume; otherwise it marks the numbers inconsistent and relate
// starts a rescan, which counts them again in the background.

// ThreadGroup is the quota group of the thread whose workspace is the
// subvolume of id ws: 2/<ws>.
func ThreadGroup(ws uint64) uint64 { return 2<<48 | ws }

// LimitThread sets the most bytes a thread's workspace and home, two
// subvolumes, may reference together: 0 means no limit. Both join the
// thread's group (made if need be), which gets the limit, and Group, so
// that the reserve counts them. A limit the workspace's own group has
// (set there before threads had homes) is lifted once the thread's group
// holds the new one, so the thread is never without its bound. home ""
// bounds the workspace alone, through the thread's group all the same.
func (q *FS) LimitThread(workspace, home string, bytes int64) error {
	top, err := q.top()
	if err != nil {
		return fmt.Errorf("diskquota: limit thread of %s: %w", workspace, err)
	}
	defer top.Close()
	ws, wsID, err := openSubvolume(workspace)
	if err != nil {
		return fmt.Errorf("diskquota: limit thread of %s: %w", workspace, err)
	}
	ws.Close()
	group := ThreadGroup(wsID)
	create := [2]uint64{1, group}
	if err := ioctl(top, iocQgroupCreate, unsafe.Pointer(&create)); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("diskquota: create quota group %s of %s: %w", groupName(group), workspace, err)
	}
	members := []uint64{wsID}
	paths := []string{workspace}
	if home != "" {
		h, homeID, err := openSubvolume(home)
		if err != nil {
			return fmt.Errorf("diskquota: limit thread of %s: %w", workspace, err)
		}
		h.Close()
		members, paths = append(members, homeID), append(paths, home)
	}
	for i, id := range members {
		if err := join(top, id, paths[i]); err != nil {
			return err
		}
		if err := relate(top, id, group, true); err != nil {
			return fmt.Errorf("diskquota: add %s to quota group %s: %w", paths[i], groupName(group), err)
		}
	}
	max := limitClear
	if bytes > 0 {
		max = uint64(bytes)
	}
	if err := setLimit(top, group, max); err != nil {
		return fmt.Errorf("diskquota: limit quota group %s of %s to %d bytes: %w", groupName(group), workspace, bytes, err)
	}
	if err := setLimit(top, wsID, limitClear); err != nil {
		return fmt.Errorf("diskquota: lift the limit of %s's own quota group: %w", workspace, err)
	}
	return nil
}

// ForgetThread takes a thread's workspace and home out of the thread's
// group and removes the group, before the thread's subvolumes go (it
// needs the workspace to find the group): btrfs removes a subvolume's own
// group, and its place in Group, once the subvolume is dropped, but never
// a group of a higher level, which the kernel also refuses to remove while
// it has members (EBUSY). A workspace that is missing or no subvolume has
// no group to forget; a home that is missing is no member.
func (q *FS) ForgetThread(workspace, home string) error {
	ws, wsID, err := openSubvolume(workspace)
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, errNotSubvolume) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("diskquota: forget the thread of %s: %w", workspace, err)
	}
	ws.Close()
	top, err := q.top()
	if err != nil {
		return fmt.Errorf("diskquota: forget the thread of %s: %w", workspace, err)
	}
	defer top.Close()
	group := ThreadGroup(wsID)
	members := []uint64{wsID}
	if home != "" {
		h, homeID, err := openSubvolume(home)
		switch {
		case err == nil:
			h.Close()
			members = append(members, homeID)
		case !errors.Is(err, os.ErrNotExist) && !errors.Is(err, errNotSubvolume):
			return fmt.Errorf("diskquota: forget the thread of %s: %w", workspace, err)
		}
	}
	for _, id := range members {
		if err := relate(top, id, group, false); err != nil {
			return fmt.Errorf("diskquota: take %s out of quota group %s: %w", groupName(id), groupName(group), err)
		}
	}
	destroy := [2]uint64{0, group}
	if err := ioctl(top, iocQgroupCreate, unsafe.Pointer(&destroy)); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("diskquota: remove quota group %s of %s: %w", groupName(group), workspace, err)
	}
	return nil
}

// ThreadLimit is the limit of referenced bytes of the thread whose
// workspace is the subvolume at workspace (0 for none), and what its
// workspace and home reference together now.
func (q *FS) ThreadLimit(workspace string) (limit, used uint64, err error) {
	ws, wsID, err := openSubvolume(workspace)
	if err != nil {
		return 0, 0, fmt.Errorf("diskquota: read the thread's quota of %s: %w", workspace, err)
	}
	defer ws.Close()
	group := ThreadGroup(wsID)
	if limit, err = groupLimit(ws, group); err != nil {
		return 0, 0, err
	}
	used, err = referenced(ws, group)
	return limit, used, err
}

// top opens the folder q was opened at, for the ioctls that change the
// quota groups. They run a transaction in the subvolume of the folder
// they are called on, and the kernel charges its reservation to that
// subvolume's groups: called on a workspace holding 1 MiB under a limit
// of 2, even making a group failed with EDQUOT (measured on Linux 6.18).
// The workspaces' folder is in a subvolume no thread's group, nor Group,
// holds.
func (q *FS) top() (*os.File, error) {
	f, err := os.Open(q.dir)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", q.dir, err)
	}
	return f, nil
}

// errNotSubvolume means a folder is not the root of a btrfs subvolume.
var errNotSubvolume = errors.New("not the root of a btrfs subvolume")

// openSubvolume opens the subvolume at path, not following a link there,
// and returns its id.
func openSubvolume(path string) (*os.File, uint64, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, 0, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("stat %s: %w", path, err)
	}
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &sfs); err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	if st.Ino != firstFreeObject || sfs.Type != unix.BTRFS_SUPER_MAGIC {
		f.Close()
		return nil, 0, fmt.Errorf("%s: %w", path, errNotSubvolume)
	}
	id, err := subvolumeID(f)
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, id, nil
}
