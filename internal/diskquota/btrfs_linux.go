// Package diskquota bounds the disk space of warren's workspaces with
// btrfs quota groups, so that the kernel itself answers EDQUOT to every
// write past a limit: writes the daemon makes, and passthrough writes the
// kernel makes to the backing file on behalf of a jail, alike.
//
// Each thread's workspace folder is a btrfs subvolume, which btrfs counts
// in a quota group of its own (0/<subvolume id>), and so is its home
// folder; the thread's quota is the limit of referenced bytes of a group
// holding both, the thread's group (thread_linux.go). Every workspace and home
// subvolume is also a member of one group of level 1, Group, whose limit
// keeps all of them together below the disk's size less a reserve.
//
// Why btrfs: ext4 and XFS project quotas need the kernel's quota formats
// (CONFIG_QFMT_V2, CONFIG_XFS_QUOTA), which many kernels, this project's
// machines among them, do not build; and their hard limits give way to a
// writer with CAP_SYS_RESOURCE (dquot.c, ignore_hardlimit), which the
// daemon and its passthrough opens have. Btrfs qgroups are built with
// btrfs and enforce their limits whatever the writer's capabilities,
// unless the filesystem's quota_override switch is on; Open refuses a
// filesystem where it is.
package diskquota

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrUnsupported means the folder's filesystem cannot enforce quotas: it
// is not btrfs.
var ErrUnsupported = errors.New("diskquota: the filesystem cannot enforce disk quotas (it is not btrfs)")

// Group is the quota group of level 1 that holds every workspace: 1/30561
// ("wa" in ASCII, for warren).
const Group = 1<<48 | 0x7761

// Ioctls of btrfs (linux/btrfs.h), magic 0x94.
const (
	iocSubvolCreate = 0x5000940e // _IOW(0x94, 14, btrfs_ioctl_vol_args)
	iocInoLookup    = 0xd0009412 // _IOWR(0x94, 18, btrfs_ioctl_ino_lookup_args)
	iocTreeSearch   = 0xd0009411 // _IOWR(0x94, 17, btrfs_ioctl_search_args)
	iocFSInfo       = 0x8400941f // _IOR(0x94, 31, btrfs_ioctl_fs_info_args)
	iocQuotaCtl     = 0xc0109428 // _IOWR(0x94, 40, btrfs_ioctl_quota_ctl_args)
	iocQgroupAssign = 0x40189429 // _IOW(0x94, 41, btrfs_ioctl_qgroup_assign_args)
	iocQgroupCreate = 0x4010942a // _IOW(0x94, 42, btrfs_ioctl_qgroup_create_args)
	iocQgroupLimit  = 0x8030942b // _IOR(0x94, 43, btrfs_ioctl_qgroup_limit_args)
	iocQuotaRescan  = 0x4040942c // _IOW(0x94, 44, btrfs_ioctl_quota_rescan_args)

	quotaCtlEnable   = 1
	limitMaxRfer     = 1 << 0
	limitClear       = ^uint64(0) // a limit of "none"
	firstFreeObject  = 256        // the inode number of a subvolume's root
	quotaTreeID      = 8
	qgroupInfoKey    = 242
	qgroupLimitKey   = 244
	searchKeySize    = 104
	searchHeaderSize = 32
)

// FS is a btrfs filesystem with quotas enabled, seen from a folder on it.
type FS struct {
	dir string
}

// Open checks that dir is on btrfs, turns quotas on there (a no-op if
// they are on) and makes Group. It refuses a filesystem whose
// quota_override switch lets a writer with CAP_SYS_RESOURCE past the
// limits. A filesystem that is not btrfs gets ErrUnsupported.
func Open(dir string) (*FS, error) {
	if ok, err := IsBtrfs(dir); err != nil {
		return nil, err
	} else if !ok {
		return nil, fmt.Errorf("%w: %s", ErrUnsupported, dir)
	}
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("diskquota: open %s: %w", dir, err)
	}
	defer f.Close()
	fsid, err := fsID(f)
	if err != nil {
		return nil, err
	}
	override, err := os.ReadFile(filepath.Join("/sys/fs/btrfs", fsid, "quota_override"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("diskquota: read quota_override of %s: %w", dir, err)
	}
	if strings.TrimSpace(string(override)) == "1" {
		return nil, fmt.Errorf("diskquota: %s: btrfs quota_override is on (/sys/fs/btrfs/%s/quota_override): root would pass every limit", dir, fsid)
	}
	ctl := [2]uint64{quotaCtlEnable, 0}
	if err := ioctl(f, iocQuotaCtl, unsafe.Pointer(&ctl)); err != nil {
		return nil, fmt.Errorf("diskquota: enable quotas on %s: %w", dir, err)
	}
	create := [2]uint64{1, Group}
	if err := ioctl(f, iocQgroupCreate, unsafe.Pointer(&create)); err != nil && !errors.Is(err, unix.EEXIST) {
		return nil, fmt.Errorf("diskquota: create quota group %s on %s: %w", groupName(Group), dir, err)
	}
	return &FS{dir: dir}, nil
}

// Enabled says whether quotas are on in dir's btrfs filesystem.
func Enabled(dir string) bool {
	f, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer f.Close()
	fsid, err := fsID(f)
	if err != nil {
		return false
	}
	_, err = os.Stat(filepath.Join("/sys/fs/btrfs", fsid, "qgroups"))
	return err == nil
}

// IsBtrfs says whether dir is on btrfs.
func IsBtrfs(dir string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false, fmt.Errorf("diskquota: statfs %s: %w", dir, err)
	}
	return st.Type == unix.BTRFS_SUPER_MAGIC, nil
}

// MakeSubvolume creates path, whose parent must exist, as a btrfs
// subvolume (mode 0755, owned by the caller). It fails with EEXIST if
// path exists.
func MakeSubvolume(path string) error {
	parent, err := os.Open(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("diskquota: create subvolume %s: %w", path, err)
	}
	defer parent.Close()
	return MakeSubvolumeAt(parent, filepath.Base(path))
}

// MakeSubvolumeAt creates the btrfs subvolume name (one path component)
// in the open folder parent, like MakeSubvolume: the kernel makes it
// right there, so no link on the way to parent is followed after it was
// opened. It fails with EEXIST if name exists.
func MakeSubvolumeAt(parent *os.File, name string) error {
	path := filepath.Join(parent.Name(), name)
	var args struct {
		fd   int64
		name [4088]byte
	}
	if len(name) >= len(args.name) {
		return fmt.Errorf("diskquota: create subvolume %s: %w", path, unix.ENAMETOOLONG)
	}
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return fmt.Errorf("diskquota: create subvolume %s: %q is not a file name: %w", path, name, unix.EINVAL)
	}
	copy(args.name[:], name)
	if err := ioctl(parent, iocSubvolCreate, unsafe.Pointer(&args)); err != nil {
		return fmt.Errorf("diskquota: create subvolume %s: %w", path, &os.PathError{Op: "mkdir", Path: path, Err: err})
	}
	return nil
}

// IsSubvolume says whether path is the root of a btrfs subvolume.
func IsSubvolume(path string) (bool, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return false, fmt.Errorf("diskquota: stat %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Ino != firstFreeObject {
		return false, nil
	}
	return IsBtrfs(path)
}

// subvolumeID is the id of the subvolume that holds the open folder f.
func subvolumeID(f *os.File) (uint64, error) {
	var args struct {
		treeid   uint64
		objectid uint64
		name     [4080]byte
	}
	args.objectid = firstFreeObject
	if err := ioctl(f, iocInoLookup, unsafe.Pointer(&args)); err != nil {
		return 0, fmt.Errorf("diskquota: subvolume of %s: %w", f.Name(), err)
	}
	return args.treeid, nil
}

// Limit sets the most bytes the subvolume at path may reference: 0 means
// no limit. It also makes the subvolume a member of Group, so that the
// reserve counts it.
func (q *FS) Limit(path string, bytes int64) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("diskquota: limit %s: %w", path, err)
	}
	defer f.Close()
	id, err := subvolumeID(f)
	if err != nil {
		return err
	}
	max := limitClear
	if bytes > 0 {
		max = uint64(bytes)
	}
	top, err := q.top()
	if err != nil {
		return fmt.Errorf("diskquota: limit %s: %w", path, err)
	}
	defer top.Close()
	if err := setLimit(top, id, max); err != nil {
		return fmt.Errorf("diskquota: limit %s to %d bytes: %w", path, bytes, err)
	}
	return join(top, id, path)
}

// Join makes the subvolume at path a member of Group, so that the
// reserve counts it, and leaves its own limit as it is.
func (q *FS) Join(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("diskquota: add %s to quota group %s: %w", path, groupName(Group), err)
	}
	defer f.Close()
	id, err := subvolumeID(f)
	if err != nil {
		return err
	}
	top, err := q.top()
	if err != nil {
		return fmt.Errorf("diskquota: add %s to quota group %s: %w", path, groupName(Group), err)
	}
	defer top.Close()
	return join(top, id, path)
}

// join makes subvolume id a member of Group; f is a folder of q's (top).
func join(f *os.File, id uint64, path string) error {
	if err := relate(f, id, Group, true); err != nil {
		return fmt.Errorf("diskquota: add %s to quota group %s: %w", path, groupName(Group), err)
	}
	return nil
}

// relate makes quota group src a member of dst (add), or no longer one,
// on the filesystem of the open f. A member already (add), or no member
// (remove), is no error.
func relate(f *os.File, src, dst uint64, add bool) error {
	var assign uint64
	if add {
		assign = 1
	}
	args := [3]uint64{assign, src, dst}
	r, err := ioctlRet(f, iocQgroupAssign, unsafe.Pointer(&args))
	if add && errors.Is(err, unix.EEXIST) || !add && errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	// A positive answer says dst's numbers could not be updated at once
	// (the kernel can add or take away a member's bytes only if they are
	// all its own, not shared with another subvolume): they are counted
	// again by a rescan, which runs in the background and may be running
	// already.
	if r > 0 {
		var rescan [8]uint64
		if err := ioctl(f, iocQuotaRescan, unsafe.Pointer(&rescan)); err != nil && !errors.Is(err, unix.EINPROGRESS) {
			return fmt.Errorf("rescan quota groups: %w", err)
		}
	}
	return nil
}

// GroupLimit is the limit of referenced bytes of Group, 0 for none.
func (q *FS) GroupLimit() (uint64, error) {
	f, err := os.Open(q.dir)
	if err != nil {
		return 0, fmt.Errorf("diskquota: read the limit of %s on %s: %w", groupName(Group), q.dir, err)
	}
	defer f.Close()
	return groupLimit(f, Group)
}

// Reserve limits Group, all workspaces together, so that reserve bytes of
// the filesystem stay free for everything else: the limit is what they
// use now plus what is free now, less reserve (at least one byte). 0
// removes the limit. It returns the limit set.
func (q *FS) Reserve(reserve int64) (uint64, error) {
	f, err := os.Open(q.dir)
	if err != nil {
		return 0, fmt.Errorf("diskquota: reserve on %s: %w", q.dir, err)
	}
	defer f.Close()
	if reserve <= 0 {
		return 0, setLimit(f, Group, limitClear)
	}
	used, err := referenced(f, Group)
	if err != nil {
		return 0, err
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		return 0, fmt.Errorf("diskquota: statfs %s: %w", q.dir, err)
	}
	free := st.Bavail * uint64(st.Bsize)
	limit := uint64(1)
	if used+free > uint64(reserve)+1 {
		limit = used + free - uint64(reserve)
	}
	if err := setLimit(f, Group, limit); err != nil {
		return 0, fmt.Errorf("diskquota: limit quota group %s to %d bytes: %w", groupName(Group), limit, err)
	}
	return limit, nil
}

func setLimit(f *os.File, qgroup, max uint64) error {
	var args struct {
		qgroupid uint64
		flags    uint64
		maxRfer  uint64
		maxExcl  uint64
		rsvRfer  uint64
		rsvExcl  uint64
	}
	args.qgroupid, args.flags, args.maxRfer = qgroup, limitMaxRfer, max
	return ioctl(f, iocQgroupLimit, unsafe.Pointer(&args))
}

// referenced reads the bytes quota group qgroup references, from its info
// item in the quota tree. A group with no item yet references nothing.
func referenced(f *os.File, qgroup uint64) (uint64, error) {
	item, err := qgroupItem(f, qgroup, qgroupInfoKey, 16)
	if err != nil || item == nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(item[8:]), nil // generation, then rfer
}

// groupLimit reads the limit of referenced bytes of quota group qgroup,
// from its limit item; 0 is none.
func groupLimit(f *os.File, qgroup uint64) (uint64, error) {
	item, err := qgroupItem(f, qgroup, qgroupLimitKey, 16)
	if err != nil || item == nil {
		return 0, err
	}
	le := binary.LittleEndian
	flags, max := le.Uint64(item[0:]), le.Uint64(item[8:])
	if flags&limitMaxRfer == 0 || max == limitClear {
		return 0, nil
	}
	return max, nil
}

// qgroupItem reads the item of type typ of quota group qgroup in the
// quota tree (at least min bytes of it); nil if there is none.
func qgroupItem(f *os.File, qgroup uint64, typ uint32, min uint32) ([]byte, error) {
	var args [4096]byte
	key := args[:searchKeySize]
	le := binary.LittleEndian
	le.PutUint64(key[0:], quotaTreeID)
	le.PutUint64(key[8:], 0)           // min_objectid
	le.PutUint64(key[16:], 0)          // max_objectid
	le.PutUint64(key[24:], qgroup)     // min_offset
	le.PutUint64(key[32:], qgroup)     // max_offset
	le.PutUint64(key[40:], 0)          // min_transid
	le.PutUint64(key[48:], ^uint64(0)) // max_transid
	le.PutUint32(key[56:], typ)        // min_type
	le.PutUint32(key[60:], typ)        // max_type
	le.PutUint32(key[64:], 1)          // nr_items
	if err := ioctl(f, iocTreeSearch, unsafe.Pointer(&args)); err != nil {
		return nil, fmt.Errorf("diskquota: read quota group %s: %w", groupName(qgroup), err)
	}
	if le.Uint32(key[64:]) == 0 {
		return nil, nil
	}
	hdr := args[searchKeySize:]
	if le.Uint32(hdr[24:]) != typ || le.Uint64(hdr[16:]) != qgroup || le.Uint32(hdr[28:]) < min {
		return nil, fmt.Errorf("diskquota: read quota group %s: unexpected item", groupName(qgroup))
	}
	return hdr[searchHeaderSize:], nil
}

// fsID is the filesystem's UUID as /sys/fs/btrfs names it.
func fsID(f *os.File) (string, error) {
	var args [1024]byte
	if err := ioctl(f, iocFSInfo, unsafe.Pointer(&args)); err != nil {
		return "", fmt.Errorf("diskquota: filesystem of %s: %w", f.Name(), err)
	}
	u := args[16:32]
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16]), nil
}

func groupName(id uint64) string { return fmt.Sprintf("%d/%d", id>>48, id&(1<<48-1)) }

func ioctl(f *os.File, req uint, arg unsafe.Pointer) error {
	_, err := ioctlRet(f, req, arg)
	return err
}

// ioctlRet is ioctl that also returns the call's non-negative result.
func ioctlRet(f *os.File, req uint, arg unsafe.Pointer) (uintptr, error) {
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), uintptr(req), uintptr(arg))
	if errno != 0 {
		return 0, errno
	}
	return r, nil
}

// SameFilesystem says whether a and b are on one btrfs filesystem, in
// whichever subvolumes (each of which has a device number of its own).
func SameFilesystem(a, b string) bool {
	id := func(dir string) string {
		f, err := os.Open(dir)
		if err != nil {
			return ""
		}
		defer f.Close()
		s, err := fsID(f)
		if err != nil {
			return ""
		}
		return s
	}
	ia := id(a)
	return ia != "" && ia == id(b)
}
