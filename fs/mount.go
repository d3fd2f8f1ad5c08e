package fs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"warren/internal/uring"
)

// Options configures one mount. The zero value is a writable mount with
// passthrough where the kernel offers it and the default cache timeouts.
type Options struct {
	// Name labels the mount in /proc/mounts ("warren:<Name>") and in logs,
	// e.g. "tenant/thread". Characters that could be read as mount options
	// are replaced.
	Name string
	// ReadOnly refuses every modifying operation with EROFS (and mounts
	// read-only, so the kernel refuses them first).
	ReadOnly bool
	// Logger receives structured logs; nil means no logs.
	Logger hclog.Logger
	// OnRefusal, if set, is called for every refused escape attempt, after
	// it is logged. It must not block.
	OnRefusal func(Refusal)
	// OnChange, if set, is told of every change through the mount
	// (watch.go), while WantChanges (if set) says anyone listens.
	OnChange    func(EntryChange)
	WantChanges func() bool
	// OnStale, if set, is called once for every modification refused
	// because its actor's read of the file is older than the file (see
	// ledger.go), after it is logged. It must not block.
	OnStale func(Stale)
	// NoPassthrough turns off FUSE passthrough even where the kernel offers it.
	NoPassthrough bool
	// EntryTimeout, AttrTimeout and NegativeTimeout say how long the kernel
	// may trust a name, the attributes of an inode and a missing name.
	// Zero means the defaults (DefaultEntryTimeout and so on); a negative
	// value means no caching.
	EntryTimeout, AttrTimeout, NegativeTimeout time.Duration
	// Debug logs every FUSE request and reply to Logger (very verbose).
	Debug bool
	// Hub, if set, joins this mount to the other mounts of the gateway,
	// so changes made through one are seen at once through the others.
	Hub *Hub
	// Target, if set, is the folder to mount onto, as a descriptor the
	// caller resolved and checked without following links; the mountpoint
	// argument of Serve then only names the mount (logs, Mountpoint). The
	// mount is made detached and moved onto the descriptor, and Close
	// unmounts the mount itself, wherever it is by then (target_linux.go).
	// Needs Linux 5.8 and root.
	Target *Target
	// Transport says how the mount's FUSE requests reach the daemon:
	// TransportClassic (the zero value), TransportURing or TransportAuto.
	Transport Transport
	// NoPollHack, for a server that never opens files of its own mounts
	// (warrend), leaves out the poll hack on a mount served over
	// io_uring (pollhack_linux.go). The hack is a request of the server
	// to its own mount; over io_uring, a server killed while one is in
	// flight cannot die: the request sits in a ring entry of a dead
	// worker, the kernel never lets go of the connection, and the
	// hack's thread, with the zombie, waits for good. Without the hack,
	// the kernel asks POLL only if some process polls a file of the
	// mount, and go-fuse's ENOSYS ends that for good; a server that
	// polled its own files itself could deadlock (see pollHack).
	NoPollHack bool
}

// Transport is how a mount's FUSE requests reach the daemon.
type Transport string

const (
	// TransportClassic reads requests from /dev/fuse and writes the
	// answers back (go-fuse's server): two system calls a request.
	TransportClassic Transport = "classic"
	// TransportURing serves FUSE over io_uring (uring_linux.go): one
	// submission answers a request and fetches the next. Serve fails if
	// the kernel does not offer it (the fuse module's enable_uring).
	TransportURing Transport = "uring"
	// TransportAuto takes io_uring where the kernel offers it and the
	// classic transport otherwise.
	TransportAuto Transport = "auto"
)

// ParseTransport reads a transport's name ("" is classic).
func ParseTransport(name string) (Transport, error) {
	switch t := Transport(name); t {
	case "":
		return TransportClassic, nil
	case TransportClassic, TransportURing, TransportAuto:
		return t, nil
	}
	return "", fmt.Errorf("fs: unknown FUSE transport %q (want classic, uring or auto)", name)
}

// URingEnabled tells whether the kernel offers FUSE over io_uring to new
// mounts: the fuse module's enable_uring parameter, which root sets.
func URingEnabled() (bool, error) {
	b, err := os.ReadFile(uringParam)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil // a kernel built without it
	}
	if err != nil {
		return false, fmt.Errorf("fs: read %s: %w", uringParam, err)
	}
	return strings.TrimSpace(string(b)) == "Y", nil
}

// uringParam is the fuse module's switch for FUSE over io_uring.
const uringParam = "/sys/module/fuse/parameters/enable_uring"

// Default cache timeouts. This daemon sees every change made through its
// mounts, and a Hub pushes each to the other mounts of the same folder, so
// the kernel may trust what it was told for a long while: most metadata
// work (git status, builds) then costs no round trip at all. A change made
// to a backing folder directly, behind the filesystem's back, shows within
// these bounds.
const (
	DefaultEntryTimeout    = 30 * time.Second
	DefaultAttrTimeout     = 30 * time.Second
	DefaultNegativeTimeout = 5 * time.Second
)

// Refusal describes an operation the boundary refused.
type Refusal struct {
	Mount  string // Options.Name
	Op     string // "symlink", "readlink", "lookup", "link", "rename", "mknod"
	Path   string // path inside the root, "/"-separated, starting with "/"
	Target string // link target, when there is one
	Reason string
}

// root is what every node of one mount shares. All fields are set before
// the mount serves and never change.
type root struct {
	id            uint64 // tells its nodes' descriptors from other mounts' (pathFd.mount)
	name          string
	fd            int    // O_PATH descriptor of the backing folder
	handleFd      int    // the backing folder opened for reading: open_by_handle_at takes no O_PATH descriptor
	dev           uint64 // its device: a lookup never crosses to another
	readOnly      bool
	noPassthrough bool
	attrTimeout   time.Duration // how long the kernel keeps attributes, unless written elsewhere (writers.go)
	requests      atomic.Uint64 // FUSE requests answered, of the kinds observedOps counts (observe.go)
	uid, gid      int           // the daemon's own ids
	log           hclog.Logger
	onRefusal     func(Refusal)
	onStale       func(Stale)
	watch         watcher  // Options.OnChange and WantChanges
	hub           *Hub     // the mount's own when Options.Hub is nil
	ownHub        bool     // hub was made for this mount alone
	fds           *fdCache // hub.fds
	// changes is the folder's change log, shared with the hub's other
	// mounts of it and its file API (changes.go).
	changes *changeLog
	// top is the node of the backing folder itself: the server's root on
	// a mount of its own, one entry of a shared connection's top folder
	// in a Pool (pool.go).
	top *node
	// inoBase is what the inode numbers the kernel sees are moved by: 0
	// on a mount of its own (the backing numbers as they are), the
	// root's slot in a shared connection otherwise (fuseIno).
	inoBase uint64
	// slot is the root's place in its shared connection; nil on a mount
	// of its own.
	slot *slot

	mu    sync.Mutex
	nodes map[uint64]*node // the nodes the kernel knows, by inode; guarded by mu
	// bigInos gives the backing inode numbers too big for a slot's range
	// numbers of their own (fuseIno); guarded by mu.
	bigInos map[uint64]uint64
}

// remember records n as the node the kernel knows for its inode.
func (r *root) remember(n *node) {
	r.mu.Lock()
	r.nodes[n.ino] = n
	r.mu.Unlock()
}

// forget drops n once the kernel forgot it.
func (r *root) forget(n *node) {
	r.mu.Lock()
	if r.nodes[n.ino] == n {
		delete(r.nodes, n.ino)
	}
	r.mu.Unlock()
}

// known returns the node the kernel knows for inode ino, or nil.
func (r *root) known(ino uint64) *node {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.nodes[ino]
}

// changedEntry tells the other mounts of this folder that the name in dir
// changed (made, removed, renamed).
func (r *root) changedEntry(dir *node, name string) {
	r.hub.post(notice{from: r, dev: r.dev, ino: dir.ino, name: name})
}

// changedInode tells the other mounts of this folder that the attributes
// or content of n changed.
func (r *root) changedInode(n *node) {
	r.hub.post(notice{from: r, dev: r.dev, ino: n.ino})
}

// refuse logs a refused escape attempt and reports it.
func (r *root) refuse(op, path, target, reason string) {
	r.log.Warn("refused", "op", op, "path", path, "target", target, "reason", reason)
	if r.onRefusal != nil {
		r.onRefusal(Refusal{Mount: r.name, Op: op, Path: path, Target: target, Reason: reason})
	}
}

// mountIDs numbers the mounts of the process (root.id).
var mountIDs atomic.Uint64

// Mount is a served workspace mount. Call Close when finished.
type Mount struct {
	mountpoint string
	server     *fuse.Server
	transport  Transport    // the one taken: classic or uring
	uring      *uringServer // on TransportURing
	root       *root
	done       chan struct{} // closed when the server stopped serving
	// mntFd is the mount's own descriptor (fsmount's): every mount is
	// made detached and moved into place (target_linux.go). It is how
	// Close finds the mount; closed by Close.
	mntFd int
	// atTarget says the mount was made onto Options.Target.
	atTarget bool
	// slot is the mount's place in a Pool's shared connection; nil for a
	// mount with a connection of its own.
	slot *slot
	// mntID is the mount's id when mntFd is -1: a Pool's mount at a path
	// keeps no descriptor (detach).
	mntID uint64

	closeOnce sync.Once
	closeErr  error
}

// Requests returns how many FUSE requests the mount answered (names,
// attributes, opens, reads and writes the daemon served, listings and
// changes of entries; observe.go).
func (m *Mount) Requests() uint64 { return m.root.requests.Load() }

// Serve mounts the folder backing at mountpoint and serves it until Close.
// backing is trusted (the gateway made it); everything below it is not.
func Serve(ctx context.Context, backing, mountpoint string, opts Options) (*Mount, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	transport, err := ParseTransport(string(opts.Transport))
	if err != nil {
		return nil, err
	}
	logger := opts.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	// What the mount is called. A Target mount is reached by its own
	// descriptor once made: serveAt points mountpoint there.
	label := mountpoint
	r, err := openRoot(backing, opts, logger)
	if err != nil {
		return nil, err
	}
	rootNode := r.top

	entry := timeout(opts.EntryTimeout, DefaultEntryTimeout)
	// Every reply with attributes sets their validity itself
	// (node.attrValidity): go-fuse puts its own in only where a reply
	// says zero, and zero is what a file written elsewhere needs.
	r.attrTimeout = timeout(opts.AttrTimeout, DefaultAttrTimeout)
	var attr time.Duration
	negative := timeout(opts.NegativeTimeout, DefaultNegativeTimeout)
	// nosymfollow: a host process follows no link in this view (link.go).
	flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOSYMFOLLOW)
	if opts.ReadOnly {
		flags |= unix.MS_RDONLY
	}
	mo := fuse.MountOptions{
		FsName:      "warren:" + mountLabel(opts.Name),
		Name:        "warren",
		MaxWrite:    1 << 20,
		DirectMount: true,
		// Posix and BSD locks go to the backing file (as OFD locks), so
		// two mounts of one folder see each other's locks.
		EnableLocks:      true,
		DirectMountFlags: flags,
		// ATOMIC_O_TRUNC: an open with O_TRUNC arrives as one OPEN, not
		// OPEN then SETATTR, so the truncation is seen at the open.
		// HANDLE_KILLPRIV_V2: the kernel stops asking for
		// security.capability before every write (one round trip per
		// write otherwise, passthrough or not), and leaves clearing
		// the set-id bits of a file written by a caller without
		// CAP_FSETID to the daemon (killpriv.go).
		// NO_OPENDIR_SUPPORT: see dirs.go.
		ExtraCapabilities: fuse.CAP_ATOMIC_O_TRUNC | fuse.CAP_HANDLE_KILLPRIV_V2 | fuse.CAP_NO_OPENDIR_SUPPORT,
		Logger:            logger.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Debug}),
		Debug:             opts.Debug,
	}
	if os.Geteuid() == 0 {
		// mount(2) directly, and say why it failed if it does, rather
		// than fall back to fusermount and its exit code.
		mo.DirectMountStrict = true
		// Other users (the jail's) may use the mount; the kernel checks
		// their permissions against the files' modes.
		mo.AllowOther = true
		mo.Options = append(mo.Options, "default_permissions")
	}
	fo := &fusefs.Options{
		MountOptions:    mo,
		EntryTimeout:    &entry,
		AttrTimeout:     &attr,
		NegativeTimeout: &negative,
		RootStableAttr:  &fusefs.StableAttr{Ino: rootNode.ino, Gen: rootNode.gen},
		// A mode of 0000 is a mode (open(O_CREAT, 0), chmod 0): go-fuse
		// would show it as 0644 otherwise.
		NullPermissions: true,
	}
	server, mntFd, err := serveAt(rootNode, &mountpoint, opts.Target, fo, transport, opts.NoPollHack, r.log)
	if err != nil && transport == TransportAuto && errors.Is(err, errURingRefused) {
		r.log.Warn("FUSE over io_uring refused, serving the classic way", "error", err)
		server, mntFd, err = serveAt(rootNode, &mountpoint, opts.Target, fo, TransportClassic, opts.NoPollHack, r.log)
	}
	if err != nil {
		r.release()
		return nil, fmt.Errorf("fs: mount %s at %s: %w", backing, mountpoint, err)
	}
	m := &Mount{mountpoint: label, server: server.Server, transport: server.transport, uring: server.uring, root: r, done: make(chan struct{}), mntFd: mntFd, atTarget: opts.Target != nil}
	r.hub.add(r)
	go func() {
		server.Wait()
		// The kernel forgets nothing more: close the descriptors of all
		// the mount's nodes now, not when (if ever) they are collected.
		r.fds.closeMount(r.id)
		r.hub.remove(r)
		r.release()
		close(m.done)
	}()
	r.log.Debug("mounted", "backing", backing, "mountpoint", label, "readonly", opts.ReadOnly, "transport", m.transport)
	return m, nil
}

// openRoot opens the backing folder and makes the root of a mount of it,
// joined to opts.Hub (or a hub of its own). Call release when no server
// serves it any more.
func openRoot(backing string, opts Options, logger hclog.Logger) (*root, error) {
	// One descriptor serves the root for everything: the lookups below
	// it (fd), open_by_handle_at (handleFd, which takes no O_PATH
	// descriptor) and the root's own node. An idle workspace costs this
	// descriptor alone.
	fd, err := unix.Open(backing, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("fs: open backing folder %s: %w", backing, err)
	}
	var st syscall.Stat_t
	gen, err := statGen(fd, "", &st)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("fs: stat backing folder %s: %w", backing, err)
	}
	rootFd, handleFd := fd, fd
	r := &root{
		id:            mountIDs.Add(1),
		name:          opts.Name,
		fd:            fd,
		handleFd:      handleFd,
		dev:           st.Dev,
		readOnly:      opts.ReadOnly,
		noPassthrough: opts.NoPassthrough,
		uid:           os.Geteuid(),
		gid:           os.Getegid(),
		log:           logger.With("mount", opts.Name),
		onRefusal:     opts.OnRefusal,
		onStale:       opts.OnStale,
		watch:         watcher{opts.OnChange, opts.WantChanges},
		hub:           opts.Hub,
		nodes:         make(map[uint64]*node),
	}
	if r.hub == nil {
		r.hub, r.ownHub = NewHub(HubConfig{Logger: r.log}), true
	}
	r.fds = r.hub.fds
	r.changes = r.hub.changeLogOf(rootID{st.Dev, st.Ino})
	// The root's descriptor is pinned: never evicted, closed with the mount.
	r.top = &node{root: r, fd: &pathFd{fd: rootFd, mountFd: handleFd}, ino: st.Ino, gen: gen}
	r.remember(r.top)
	return r, nil
}

// release closes what openRoot opened: the root's descriptors, its change
// log's reference, and its hub if it was the root's own.
func (r *root) release() {
	r.hub.dropChangeLog(r.changes)
	if r.ownHub {
		r.hub.Close()
	}
	// fd and handleFd are the root node's descriptor (openRoot).
	r.top.fd.close()
}

// isTop tells whether n is the root's own folder.
func (n *node) isTop() bool { return n == n.root.top }

// count counts a request of a root served by a Pool, whose connection's
// requests are those of many roots (observedOps counts a mount of its
// own). The kinds counted are those that show a root is in use: lookups,
// attributes, opens, creates and listings.
func (r *root) count() {
	if r.slot != nil {
		r.requests.Add(1)
	}
}

// inoBits is the width of a slot's range of inode numbers in a shared
// connection: backing numbers below 1<<(inoBits-1) keep their value within
// it, bigger ones get numbers of the upper half, one by one (fuseIno).
const inoBits = 43

// fuseIno is the inode number the kernel knows the backing inode ino by.
// On a mount of its own it is ino itself. In a shared connection the
// roots' folders may lie on different filesystems (a btrfs subvolume per
// workspace numbers its inodes from 256 again), so each root's numbers are
// moved into a range of their own.
func (r *root) fuseIno(ino uint64) uint64 {
	if r.inoBase == 0 {
		return ino
	}
	if ino < 1<<(inoBits-1) {
		return r.inoBase | ino
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.bigInos[ino]
	if !ok {
		if r.bigInos == nil {
			r.bigInos = make(map[uint64]uint64)
		}
		v = r.inoBase | 1<<(inoBits-1) | uint64(len(r.bigInos))
		r.bigInos[ino] = v
	}
	return v
}

// stable is the go-fuse identity of the backing inode ino.
func (r *root) stable(mode uint32, ino, gen uint64) fusefs.StableAttr {
	return fusefs.StableAttr{Mode: mode, Ino: r.fuseIno(ino), Gen: gen}
}

// Transport returns how the mount is served: TransportClassic or
// TransportURing (TransportAuto took one of them).
func (m *Mount) Transport() Transport { return m.transport }

// served is a mount's go-fuse server and the transport it is served on.
type served struct {
	*fuse.Server
	transport Transport
	uring     *uringServer // on TransportURing
}

// serveNodes serves the node tree on the /dev/fuse descriptor fuseFd, with
// directories served without OPENDIR where the kernel allows (dirs.go),
// over the transport asked for: TransportClassic, or TransportURing, or
// TransportAuto, which takes io_uring where the kernel offered it in INIT.
// NewServer has read and answered INIT when it returns, so the mount
// serves: WaitMount is not called, for its poll hack would open a file of
// the mount, a request of the daemon to its own mount (serveAt).
//
// On an error with a non-nil server, the server owns fuseFd: the caller
// dissolves the mount and then calls server.Serve, which finds the
// connection gone and closes it.
func serveNodes(root fusefs.InodeEmbedder, fuseFd int, opts *fusefs.Options, transport Transport, log hclog.Logger) (served, error) {
	var acct *serverAcct
	if n, ok := root.(*node); ok {
		acct = &serverAcct{id: n.root.id, requests: &n.root.requests, hub: n.root.hub, log: n.root.log}
	}
	return serveNodesAcct(root, fuseFd, opts, transport, log, acct)
}

// serverAcct is what a server's requests are counted against: the open
// files of its users (openFilesCapped, by id), the requests it answered
// and the hub's observer. nil counts nothing (tests' own trees).
type serverAcct struct {
	id       uint64 // fdCache.filesOf's key: the root's id, or a shared connection's
	requests *atomic.Uint64
	hub      *Hub
	log      hclog.Logger
}

// serveNodesAcct is serveNodes with the server's accounts given.
func serveNodesAcct(root fusefs.InodeEmbedder, fuseFd int, opts *fusefs.Options, transport Transport, log hclog.Logger, acct *serverAcct) (served, error) {
	var inner fuse.RawFileSystem = &killPriv{RawFileSystem: fusefs.NewNodeFS(root, opts)}
	if acct != nil {
		inner = &openFilesCapped{RawFileSystem: inner, fds: acct.hub.fds, id: acct.id, log: acct.log}
	}
	raw := &dirsWithoutOpen{RawFileSystem: inner}
	var fs fuse.RawFileSystem = raw
	if acct != nil {
		fs = &observedOps{RawFileSystem: raw, requests: acct.requests, observe: acct.hub.observe}
	}
	mo := opts.MountOptions
	if transport != TransportClassic {
		if err := uring.Probe(); err != nil {
			if transport == TransportURing {
				return served{}, fmt.Errorf("%w: %v", errURingRefused, err)
			}
			transport = TransportClassic
		} else if on, _ := URingEnabled(); on || transport == TransportURing {
			mo.ExtraCapabilities |= fuse.CAP_OVER_IO_URING
			// Locks stay with the kernel, per mount. Forwarded, a lock
			// that waits holds a ring entry, and the kernel hands a
			// request queued while all of a queue's entries were taken
			// only to an entry that is answered, never to one added
			// since: lock waits that take every entry of a queue at once
			// stall it for good (an unlock queued behind them too).
			mo.EnableLocks = false
		} else {
			transport = TransportClassic
		}
	}
	server, err := fuse.NewServer(fs, "/dev/fd/"+strconv.Itoa(fuseFd), &mo)
	if err != nil {
		return served{}, err
	}
	if server.KernelSettings().Flags64()&fuse.CAP_NO_OPENDIR_SUPPORT != 0 {
		raw.handleless.Store(true)
	}
	if transport != TransportClassic && server.KernelSettings().Flags64()&fuse.CAP_OVER_IO_URING == 0 {
		if transport == TransportURing {
			return served{Server: server}, fmt.Errorf("%w: the kernel does not offer it (%s is not Y)", errURingRefused, uringParam)
		}
		transport = TransportClassic
	}
	if transport == TransportClassic {
		go server.Serve()
		return served{Server: server, transport: TransportClassic}, nil
	}
	us, err := startURing(fuseFd, fs, &mo, server.KernelSettings(), log)
	if err != nil {
		return served{Server: server}, err
	}
	go func() {
		us.wait()
		server.Serve()
	}()
	return served{server, TransportURing, us}, nil
}

func timeout(v, def time.Duration) time.Duration {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

// mountLabel keeps a name safe inside a mount option string.
func mountLabel(name string) string {
	if name == "" {
		return "workspace"
	}
	return strings.Map(func(c rune) rune {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
			return c
		case strings.ContainsRune("%._-/~", c):
			return c
		}
		return '_'
	}, name)
}

// Mountpoint returns where the mount is.
func (m *Mount) Mountpoint() string { return m.mountpoint }

// Done is closed once the mount stopped serving.
func (m *Mount) Done() <-chan struct{} { return m.done }

// Close unmounts. The mount is detached through its own descriptor,
// wherever it is by then (never another mount by mistake, served or not),
// and lazily: if it is busy (a process still has a file open or its cwd
// there), it disappears from the tree at once and stops serving when its
// last user lets go. Close returns nil only once it is gone from the mount
// table. A mount at a path (no Target) then waits a little for serving to
// stop, as an unused mount does at once; Done tells when it did.
func (m *Mount) Close() error {
	m.closeOnce.Do(func() {
		if m.slot != nil {
			m.closeErr = m.slot.close(m)
		} else {
			m.closeErr = m.detach()
		}
		if m.closeErr != nil || m.atTarget {
			return
		}
		select {
		case <-m.done:
		case <-time.After(closeWait):
			m.root.log.Info("mount busy, detached lazily", "mountpoint", m.mountpoint)
		}
	})
	return m.closeErr
}

// closeWait bounds how long Close waits for an unmounted path mount to
// stop serving; a busy one serves on until its last user lets go.
const closeWait = 2 * time.Second

// detach takes the mount out of the tree through its own
// descriptor, wherever it was moved, and lets it go: it stops serving once
// no process uses it any more (at once when none does). It never waits for
// the server, so it cannot hang on a busy or stuck mount; Done tells when
// serving stopped.
func (m *Mount) detach() error {
	if m.mntFd < 0 {
		return m.detachAt()
	}
	if err := DetachFd(m.mntFd); err != nil {
		return fmt.Errorf("fs: unmount %s: %w", m.mountpoint, err)
	}
	unix.Close(m.mntFd)
	m.root.log.Debug("detached", "mountpoint", m.mountpoint)
	return nil
}

// detachAt detaches a mount that kept no descriptor of its own: the
// folder at its path is opened without following links, and detached
// through that descriptor only if it is the root of this very mount (its
// mount id). A mount no longer in the mount table is gone already.
func (m *Mount) detachAt() error {
	fd, err := unix.Open(m.mountpoint, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == nil {
		id, isRoot, idErr := MountID(fd)
		if idErr == nil && isRoot && id == m.mntID {
			err = DetachFd(fd)
			unix.Close(fd)
			if err != nil {
				return fmt.Errorf("fs: unmount %s: %w", m.mountpoint, err)
			}
			m.root.log.Debug("detached", "mountpoint", m.mountpoint)
			return nil
		}
		unix.Close(fd)
	}
	if _, attached, lerr := LookupMount(m.mntID); lerr != nil {
		return fmt.Errorf("fs: unmount %s: %w", m.mountpoint, lerr)
	} else if attached {
		return fmt.Errorf("fs: unmount %s: the mount %d is no longer at its path", m.mountpoint, m.mntID)
	}
	return nil
}

// DetachStale lazily unmounts whatever is mounted at mountpoint: a mount
// left by a crashed daemon answers "transport endpoint is not connected"
// until it is detached. It is not an error if nothing is mounted there.
func DetachStale(mountpoint string) error {
	mountpoint = filepath.Clean(mountpoint)
	for range 16 { // mounts may be stacked
		mounted, err := IsMountpoint(mountpoint)
		if err != nil || !mounted {
			return err
		}
		if err := unix.Unmount(mountpoint, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("fs: detach stale mount %s: %w", mountpoint, err)
		}
	}
	return fmt.Errorf("fs: detach stale mount %s: still mounted after 16 detaches", mountpoint)
}

// IsMountpoint reports whether something is mounted at path: whether the
// file there, opened without following a link in its place, is the root
// of a mount. It asks the filesystem nothing (MountID), so a dead FUSE
// mount answers too, and it costs the same however many mounts there are
// (reading the mount table cost a bind of the 10,000th thread ten times
// what it cost the first).
func IsMountpoint(path string) (mounted bool, err error) {
	path = filepath.Clean(path)
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("fs: open %s: %w", path, err)
	}
	defer unix.Close(fd)
	// A link found in path's place is no mount's root: false.
	_, root, err := MountID(fd)
	if err != nil {
		return false, err
	}
	return root, nil
}

// RaiseFileLimit lifts the soft limit on open files to the hard limit. A
// mount keeps descriptors for the inodes the kernel knows (within a budget,
// fdcache.go), so a daemon serving many busy workspaces needs far more than
// the usual 1024. The hard limit is left as it is: it is the operator's
// (ulimit -Hn, prlimit, LimitNOFILE=), and the descriptor budget keeps a
// reserve below whatever it is.
func RaiseFileLimit() error {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("fs: read open-file limit: %w", err)
	}
	if lim.Cur >= lim.Max {
		return nil
	}
	lim.Cur = lim.Max
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("fs: raise open-file limit: %w", err)
	}
	return nil
}
