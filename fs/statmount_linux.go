package fs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mountFlagsOf returns the per-mount flags (MOUNT_ATTR_*) of the mount
// whose root is fd, asked of the kernel for that one mount (statmount(2),
// Linux 6.8): what reading /proc/self/mountinfo tells, at a cost that does
// not grow with the number of mounts. ok is false where the kernel has no
// statmount; the caller then reads the mount table.
func mountFlagsOf(fd int) (attrs uint64, ok bool, err error) {
	id, err := uniqueMountID(fd)
	if errors.Is(err, errNoUniqueID) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	attrs, found, ok, err := statmountBasic(id)
	if err != nil || !ok {
		return 0, ok, err
	}
	if !found {
		return 0, false, fmt.Errorf("fs: statmount: the mount %d is not attached", id)
	}
	return attrs, true, nil
}

// errNoUniqueID: the kernel gives no 64-bit mount ids (before 6.8).
var errNoUniqueID = errors.New("fs: statx: the kernel gives no unique mount id")

// uniqueMountID returns the 64-bit, never reused id of the mount fd is on
// (STATX_MNT_ID_UNIQUE), asking the filesystem nothing.
func uniqueMountID(fd int) (uint64, error) {
	var stx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_DONT_SYNC, unix.STATX_MNT_ID_UNIQUE, &stx); err != nil {
		return 0, fmt.Errorf("fs: statx: %w", err)
	}
	if stx.Mask&unix.STATX_MNT_ID_UNIQUE == 0 {
		return 0, errNoUniqueID
	}
	return stx.Mnt_id, nil
}

// mountAttached tells whether the mount of unique id is attached in this
// process's mount namespace; ok is false without statmount.
func mountAttached(id uint64) (attached, ok bool, err error) {
	_, found, ok, err := statmountBasic(id)
	return found, ok, err
}

// statmountBasic asks statmount(2) for the basic information of the
// mount of unique id: its flags, and whether it is attached in this
// namespace at all (found). ok is false where the kernel has no
// statmount.
func statmountBasic(id uint64) (attrs uint64, found, ok bool, err error) {
	// struct mnt_id_req, version 0: size, spare, mnt_id, param.
	var req [24]byte
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint64(req[8:], id)
	binary.NativeEndian.PutUint64(req[16:], statmountMntBasic)
	var buf [512]byte
	_, _, errno := unix.Syscall6(unix.SYS_STATMOUNT, uintptr(unsafe.Pointer(&req[0])), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0, 0)
	switch {
	case errno == unix.ENOSYS:
		return 0, false, false, nil
	case errno == unix.ENOENT:
		return 0, false, true, nil
	case errno != 0:
		return 0, false, false, fmt.Errorf("fs: statmount: %w", errno)
	}
	// struct statmount: mask at 8, mnt_attr at 64.
	if binary.NativeEndian.Uint64(buf[8:])&statmountMntBasic == 0 {
		return 0, false, false, errors.New("fs: statmount: no basic mount information")
	}
	return binary.NativeEndian.Uint64(buf[64:]), true, true, nil
}

// statmountMntBasic is STATMOUNT_MNT_BASIC: the mount's id, parent,
// flags and propagation.
const statmountMntBasic = 0x2
