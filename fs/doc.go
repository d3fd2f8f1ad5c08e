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
//   - Every mount is nosymfollow (hostview.go): the kernel follows no
//     symlink in it (ELOOP), so no link an agent makes leads a host
//     process anywhere; links are still there and read as links. Serve
//     refuses to serve a mount that lacks the flag. (The jail binds the
//     mount without it: links work inside, where they reach at most the
//     jail's own root.)
//   - As defence in depth, symlinks are judged by where the kernel would
//     end up following them (link.go), walking the target one name at a
//     time from descriptors; any error in that walk but a missing name
//     counts as "leads out". Making one that leads out (an absolute
//     target, ".." climbing out, directly or through other links) fails
//     with EPERM; a rename to another folder that would carry a link
//     (itself, or any in a moved folder's tree) to where it leads out
//     fails with EPERM (EXDEV for a tree too big to check); reading one
//     that leads out fails with EPERM, which also stops the kernel from
//     following it in the jail — so a link planted in the backing folder
//     by someone else is refused when read.
//   - A symlink has one name: a hard link of a symlink fails with EPERM,
//     and one found with more than one name is refused when read, so the
//     folder the check starts from is the only one the kernel can come
//     through.
//   - A hard link can only join two names of this mount: the kernel hands
//     over only inodes of the same mount.
//   - Device nodes cannot be made, whiteouts (RENAME_WHITEOUT) neither;
//     the mount is nosuid and nodev.
//   - Permissions are the kernel's (default_permissions), against owners
//     and modes as a local filesystem keeps them, though the daemon makes
//     everything as root: a new entry belongs to its caller and has
//     exactly the mode asked for (node.ownByCaller: not the daemon's
//     umask again); a write or truncate by a caller without CAP_FSETID
//     clears the set-id bits (killpriv.go); a name over 255 bytes is
//     ENAMETOOLONG.
//   - Every refusal is logged with the mount's name, the operation, the
//     path inside the root and the reason, and reported to
//     Options.OnRefusal.
//
// # Mounting onto a descriptor
//
// With Options.Target, Serve mounts onto a folder named by a descriptor,
// not by a path: the filesystem is made detached (fsopen, fsmount), served,
// and moved onto the descriptor (move_mount); Close detaches that mount
// through its own descriptor, wherever it is by then, and never waits for
// the filesystem (target_linux.go). The gateway's inspection mounts use it.
// A mount at a path (the threads') is made the same way and moved onto the
// folder at the path, opened without following links; Close detaches it
// through its descriptor too, and waits a little for it to stop serving.
//
// # Many workspaces on one connection
//
// A Pool (pool.go) serves many roots on a few FUSE connections: each root
// is an entry of a connection's top folder, which no process sees, and
// its mount is a bind of that entry (clone_linux.go makes it from a
// thread with a descriptor table of its own, since the walk to the entry
// is a request to this daemon). The kernel keeps ".." at a bind's root,
// so the boundary is the same as a mount's own. Each root's inode
// numbers are moved into its slot's range (root.fuseIno). The code below
// a root is the same: a node knows its root, and the root's own folder
// is root.top, whichever is the server's root.
//
// # Requests to its own mounts
//
// The serving process never makes a FUSE request to a mount it serves, but
// one (below): a thread waiting for its own server's answer cannot end when
// the process is killed, the process then stays a zombie holding every
// descriptor (the store's lock, /dev/fuse, so its mounts hang instead of
// failing) until the connection is aborted through fusectl. The places
// where go-fuse or this package made such requests, and what replaced them:
//
//   - go-fuse's WaitMount opens .go-fuse-epoll-hack on the mount (poll
//     hack): not called; go-fuse is handed the /dev/fuse descriptor
//     ("/dev/fd/N") and has answered INIT when NewServer returns.
//   - go-fuse's mount(2) stats the mount point first (a stale mount there
//     answers): replaced by fsopen/fsmount, and the mount point is opened
//     O_PATH, which asks the filesystem below nothing.
//   - statfs of the new mount to check its flags (nosymfollow...) sends
//     STATFS: the flags are read from /proc/self/mountinfo instead, for the
//     mount id statx gives without asking (AT_STATX_DONT_SYNC).
//   - Close's umount without MNT_DETACH waited for the server: the mount is
//     detached through its descriptor, which needs no answer.
//   - the poll hack itself is still needed (a process that serves a mount
//     and opens its files can deadlock its runtime on POLL otherwise), so
//     it runs on a thread of its own whose copy of the descriptor table
//     holds no /dev/fuse descriptor: killed there, that thread does not
//     keep the connection open; it is aborted and the thread ends
//     (pollhack_linux.go). That copy holds no io_uring ring either (a
//     ring's commands hold /dev/fuse open). Over io_uring that is not
//     enough: a request in flight when the server dies sits in a ring
//     entry of a dead worker and the connection is never let go, so a
//     server that opens no file of its mounts (warrend) sets
//     Options.NoPollHack and makes no request to them at all.
//
// go-fuse's mount(2) also left the /dev/fuse descriptor inheritable, so
// every process started after a mount (a jail's init) held its connection
// open after the daemon died; fsopen's descriptors are close-on-exec.
//
// # No lost edits
//
// Every mount of a Hub, and the file API (files.go), share one ledger
// (ledger.go) of per-path locks, versions and read records, keyed by the
// backing directory's (device, inode) and the entry name: the real path,
// whatever mount or root reached it. Every modifying operation holds its
// path's lock from its check to its record (guard.go); a version moves on
// every change, and a change behind the filesystem's back is seen by the
// path's fingerprint (inode, size, ctime in ns). A modification by an
// actor (actors.go: a registered run and its processes' descendants, or a
// process of its own, told apart from a later one with its pid) whose
// read is older than the version fails with ESTALE, is logged and is
// reported to Options.OnStale. Identity is resolved at open, create,
// setattr, rename and unlink, and carried on the open file: reads and
// writes pay nothing for it. Read records are bounded (HubConfig.MaxReads)
// and dropped when their process ends or their run is ended.
//
// The file API's write and edit replace a file atomically and durably
// under its path's lock (files.go, atomic_linux.go): the new content goes
// to an O_TMPFILE in the same folder with the old file's mode and owner,
// is fsync'ed, linked under a hidden name and renamed over the old one,
// and the folder is fsync'ed; the ledger records the new inode. A write
// that fails before the rename changes nothing. A file with several hard
// links is written in place instead (space reserved first, then fsync'ed),
// so that its links stay. A crash between the link and the rename leaves
// a hidden .warren-write- file, which the first write in its folder after
// a start removes (never one in use: Hub.temps knows those).
//
// Beside read, write and edit, the file API lists, stats, makes,
// removes and renames entries (tree.go, tree_change.go), and streams a
// file of any size in and out (stream.go). They resolve paths as Read
// does, links on the way followed below the root only, and a call on an
// entry itself (remove, rename, stat without follow) never follows the
// last link. Listing and stat bring each entry's version up to date but
// record no read. Remove refuses, before it removes anything, a tree
// holding a file its actor read before its last change, and checks each
// file again under the lock it is removed under (a change racing the two
// passes can leave a refused remove half done, never a stale file
// removed). Rename refuses to replace a file read before its last change,
// and judges the links it moves to another folder as a mount's rename
// does (link.go, linkJudge.checkMove). A streamed read takes no lock
// while bytes flow and records the version it started from; a streamed
// write takes its content into a temporary file first, then checks again
// and replaces the file as write does.
//
// # Changes as they happen
//
// A mount's Options.OnChange and a Files' WatchChanges are told of every
// change of an entry as it is made, with its actor and version
// (watch.go): created, changed, removed, renamed; a handle's writes at its
// close. The path is computed only while the watcher wants changes. The
// callback runs with the path's lock held and must only queue.
//
// # What changed since a checkpoint
//
// Every mount of a folder and its file API share the folder's change log
// (changes.go): the set of paths changed since a caller last took it, so
// that a checkpoint reads what changed, not what exists. A change is
// marked after it is made; the set says when it is not complete (a new
// log, an overflow, a file with several names changed), and the caller
// then walks the folder. Files.Freeze holds every modification of the
// folder's entries back while a checkpoint reads one state of the tree.
// A restore changes the entries through a Restorer (restore.go): each
// under its path's lock, each file replaced atomically, every version it
// touches moved, no link followed.
//
// A change made beside a mount (the file API, a restore) is told to every
// mount of the folder before the call returns (Hub.flush): a command run
// right after it sees it. A restore's notices are never dropped for a full
// queue (Hub.postWait); they are sent once its step let go of its locks.
//
// A mount whose kernel may hold a stale size or stale pages of a file
// (changed through another mount, the file API, or behind the
// filesystem's back) is notified before its next open of the file is
// answered (node.syncKernel).
//
// # Caching
//
// Timeouts are set explicitly (go-fuse turns caching off for a nil
// timeout): entries and attributes DefaultEntryTimeout and
// DefaultAttrTimeout, missing names DefaultNegativeTimeout. They are long
// because this daemon sees every change made through its mounts and a Hub
// pushes each change to the other mounts of the same folder (hub.go).
// The one change it cannot push is a write passed through while its file
// stays open: while a mount has a file open for writing, the other mounts
// of the folder are told its attributes with no validity at all, so a
// stat there shows each write at once (writers.go). Every reply sets the
// validity of its attributes itself (node.attrValidity).
//
// Directories are served without OPENDIR where the kernel allows it
// (dirs.go), so the kernel keeps their listings and a repeated walk of a
// tree costs no round trip. Symlink targets are never cached: whether a
// link leads out depends on other links, which may change, so each follow
// is checked again.
//
// Each inode's open files are served one way at a time (iomode.go): where
// the kernel offers FUSE passthrough (root, Linux 6.9+), opens that may
// write and reads of big files are passed through, so reads and writes go
// from the kernel to the backing file and never reach the daemon; small
// files opened only to be read are served by the daemon once and then from
// the kernel's page cache (FOPEN_KEEP_CACHE), kept only while the file
// and its version are unchanged. An inode goes from cached to passed
// through only a while after its last cached open closed (a go-fuse
// release runs late); until then its writes are served by the daemon. No close sends a FLUSH.
// Options.NoPassthrough turns passthrough off. Writes are up to 1 MiB per
// request.
//
// # Errors
//
// Node operations return syscall.Errno; errors of the host are converted
// in one place, go-fuse's ToErrno. Serve and Close return wrapped errors
// that say which step failed.
//
// # Descriptors and memory
//
// The node descriptors are a cache with one budget per Hub (fdcache.go):
// half the open-file limit, and at least 512 descriptors left below it for
// the daemon's own work (sockets, pipes, the store, /dev/fuse of new
// mounts, open files). A descriptor is idle, and may be closed, from the
// moment it is opened until an operation uses it; each new one closes idle
// ones, least recently used first, down to the budget, and a closed one is
// reopened with open_by_handle_at, which names the same inode exactly. So
// only descriptors in use by requests being served may go beyond the
// budget, and the kernel may know any number of inodes. Descriptors are
// closed for good when the kernel forgets an inode, when a node that
// go-fuse dropped is collected, and, for all the nodes of a mount, when
// its server stops.
//
// Each file the mounts' users hold open is a descriptor of the daemon too
// (until its RELEASE), so those are capped as well, at half of what the
// budget leaves (fileCap), where every file handle passes (openFilesCapped,
// around go-fuse's raw filesystem): past the cap, OPEN, CREATE and TMPFILE
// fail with ENFILE, and the other half stays the daemon's own whatever the
// users do.
//
// The nodes are bounded too (HubConfig.MaxNodes): past the bound, the
// Hub's own goroutine drops the least recently used from the kernel's
// dentry cache (FUSE_NOTIFY_PRUNE, FUSE protocol 7.45, or
// FUSE_NOTIFY_INVAL_ENTRY on older kernels), and the kernel forgets the
// inodes nobody uses.
//
// # Goroutines
//
// Every goroutine the package starts has an owner that stops it and waits
// for it:
//
//   - A Hub's three: delivery (Hub.deliver: the change notices to the
//     other mounts), the sweeper (Hub.sweeper: the records and
//     registrations of ended processes, every sweepEvery) and the node
//     evictor (fdCache.evictNodes). NewHub starts them; Hub.Close stops
//     them and waits for all three, every call of it, a second or
//     concurrent one too.
//   - A Mount's: go-fuse's serving goroutines (serveNodes; a request is
//     served on the goroutine that read it, and fuse.Server.Wait waits
//     for them all), and the mount's watcher (Serve), which waits for
//     them, then closes the descriptors of the mount's nodes, leaves the
//     hub (and closes it if it was the mount's own) and closes Done. They
//     end when the kernel ends the connection: Mount.Close detaches the
//     mount, and serving stops once no process uses it, at once if none
//     does. Close waits for that a while (closeWait) for a mount at a
//     path, and not at all for a Target mount: a busy mount cannot be
//     made to stop sooner. Done is closed when they all ended.
//   - The poll hack's (pollhack_linux.go): pollHack waits for its answer,
//     and its thread ends with it.
//
// # Locks
//
// Lock order, outermost first: a lock is taken only while no lock below
// it in this list is held.
//
//  0. A folder's change gate (changeLog.gate, changes.go): shared by each
//     modification of an entry, from before its path locks until its
//     change is marked, exclusive by Files.Freeze. Never held across a
//     kernel notification (an open for writing lets it go around
//     syncKernel), and taken once per operation: a shared holder that
//     took it again behind a waiting Freeze would wait for itself.
//  1. A ledger path lock (pathState.mu, ledger.go); two for a rename,
//     taken in one global order (comparePathKeys). A modification holds
//     it from its check to its record (guard.go). A Restorer removing a
//     folder takes its entries' locks one by one, never with the
//     folder's held.
//  2. A node's descriptor lock (pathFd.mu, fdcache.go).
//  3. The descriptor cache's lock (fdCache.mu), which takes a pathFd's
//     mu only with TryLock: its eviction finds the descriptors the other
//     way round.
//  4. Leaves, which take no other lock while held: the ledger's own mu
//     (references to path states, read records, idleList), a Hub's mu
//     (its mounts), a root's mu (the nodes its kernel knows), an inode's
//     open-file mode (ioMode.mu, iomode.go), the actors' mu (actors.mu,
//     actors.go: registrations and cached callers; a jail's RunOf is
//     called with it released), the file API's temporary files
//     (tempFiles.mu, atomic_linux.go), a change log's set
//     (changeLog.mu), the count of open writers (openWriters.mu,
//     writers.go), and the io_uring transport's (uring_linux.go): a
//     worker's answers from goroutines (uringQueue.mu) and the requests
//     served on goroutines (uringServer.asyncMu).
//
// A Hub's sendMu is held shared by a sender that waits for room in the
// delivery queue (postWait, flush) and exclusive by Close; it is taken
// with no lock above held, nor the change gate: delivery waits for the
// kernel, which may wait for a request that waits for them.
//
// go-fuse's own locks (its bridge's, each Inode's) come after all of
// these: the package may call into go-fuse's tree (NewInode, Parent,
// Path) holding a lock of its own, and go-fuse calls the package's code
// (the node operations, OnForget) with none of its locks held. A Mount's
// closeOnce is held while Close waits for the watcher, which takes only
// the locks above and never calls Close.
//
// No path lock is held across a FUSE notification: a WRITE waiting for a
// path lock may hold the pages a notification waits for (the Hub
// delivers its notifications from its own goroutine; an open notifies
// with no path locked, and so does an open for writing when it drops the
// other mounts' attributes). The data path takes no lock of this package with
// passthrough (reads and writes never reach it); without it, a WRITE
// holds its path's lock and nothing else.
package fs
