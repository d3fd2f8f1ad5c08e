// Package fs is the workspace filesystem: a FUSE filesystem (go-fuse/v2)
// that serves one backing folder at a mount point, at the POSIX fidelity
// agents need (create, write, rename, symlink, hard link, chmod, truncate,
// xattrs, mmap, flock and POSIX locks), and that is a hard boundary: no
// path or link leads out of its root.
//
// # What it promises
//
//   - The daemon never resolves a backing path as a string. Each inode the
//     kernel knows holds an O_PATH descriptor of its backing inode; every
//     operation acts on that descriptor, or on one name below a directory's
//     descriptor, opened with O_NOFOLLOW and RESOLVE_BENEATH |
//     RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV. A symlink swapped into the
//     backing folder is opened as a symlink, never walked, and a lookup
//     never crosses into another filesystem mounted below the root.
//   - Symlinks are judged by where the kernel would end up following them
//     (link.go). Making one that leads out (an absolute target, ".."
//     climbing out, directly or through other links) fails with EPERM;
//     moving one to a directory from where it would lead out fails too;
//     reading one that leads out fails with EPERM, which also stops the
//     kernel from following it — so a link planted in the backing folder by
//     someone else is refused when read or followed.
//   - A hard link can only join two names of this mount: the kernel hands
//     over only inodes of the same mount.
//   - Device nodes cannot be made; the mount is nosuid and nodev.
//   - Every refusal is logged with the mount's name, the operation, the
//     path inside the root and the reason, and reported to
//     Options.OnRefusal.
//
// # Caching
//
// Timeouts are set explicitly (go-fuse turns caching off for a nil
// timeout): entries and attributes DefaultEntryTimeout and
// DefaultAttrTimeout, missing names DefaultNegativeTimeout. Open files keep
// the page cache (FOPEN_KEEP_CACHE, directories FOPEN_CACHE_DIR), and the
// kernel drops it when a file's size or mtime changed (AUTO_INVAL_DATA).
// Directories are served without OPENDIR where the kernel allows it
// (dirs.go), so the kernel keeps their listings and a repeated walk of a
// tree costs no round trip. Symlink targets are never cached: whether a link leads out depends on
// other links, which may change, so each follow is checked again. Where the
// kernel offers FUSE passthrough (root, Linux 6.9+), reads and writes of
// regular files go straight from the kernel to the backing file and never
// reach the daemon; Options.NoPassthrough turns that off. Writes are up to
// 1 MiB per request.
//
// # Errors
//
// Node operations return syscall.Errno; errors of the host are converted
// in one place, go-fuse's ToErrno. Serve and Close return wrapped errors
// that say which step failed.
//
// # Descriptors
//
// The node descriptors are a cache with one budget per Hub (half the
// open-file limit by default, fdcache.go): idle ones are closed least
// recently used first and reopened with open_by_handle_at, which names the
// same inode exactly. So the kernel may know any number of inodes, and a
// container's open-file cap is never hit by a big tree. Descriptors are
// closed for good when the kernel forgets an inode, or when a node that
// go-fuse dropped is collected.
//
// # Locks
//
// Lock order, outermost first: a pathFd's mu, then the fdCache's mu; a
// Hub's mu and a root's mu are leaves. No lock is held across a FUSE
// notification (the Hub delivers them from its own goroutine). The data
// path takes no lock of this package: with passthrough, reads and writes
// never reach it, and without it they go to the open file's descriptor.
package fs
