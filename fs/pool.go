package fs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// A Pool serves the workspaces of many threads on a few FUSE connections,
// so that an idle workspace costs the daemon no reader thread and no
// /dev/fuse descriptor of its own.
//
// Each connection's root is a folder of the pool's own (top), never
// mounted anywhere: its mount is made detached and kept by its descriptor
// only. Each workspace served on it is one entry of top, named by its
// slot number, whose node is the workspace's root (root.top); its mount
// at the thread's mount path is a bind of that entry (clone_linux.go),
// with the flags of a mount of its own (nosuid, nodev, nosymfollow, and
// read-only when asked). The kernel keeps ".." at a bind's root: it climbs
// to the folder that holds the mount path, never into top, so no other
// workspace of the connection is reachable from one.
//
// Inode numbers: the workspaces of one connection may lie on different
// filesystems (on btrfs each is a subvolume, numbering its inodes from
// 256), so each root's are moved into a range of its slot (root.fuseIno).
//
// A workspace served by a Pool stops being served once it is closed and
// the kernel forgot its root: at once when no process uses it, when the
// last user lets go otherwise. A connection is let go once it holds no
// workspace and newer ones are made for new workspaces (PoolConfig.Slots).
type Pool struct {
	cfg   PoolConfig
	log   hclog.Logger
	clone *cloner

	mu     sync.Mutex
	cur    *conn          // where new roots go; guarded by mu
	conns  map[*conn]bool // every connection still serving; guarded by mu
	closed bool           // guarded by mu
}

// PoolConfig configures a Pool.
type PoolConfig struct {
	// Hub joins the pool's mounts to the gateway's other mounts and file
	// API; required.
	Hub *Hub
	// Logger receives structured logs; nil means no logs.
	Logger hclog.Logger
	// Slots is how many roots one connection serves in its life before a
	// new connection is made; 0 means DefaultPoolSlots. A slot is never
	// used twice, so that no inode number the kernel may still hold of a
	// closed root comes back for another.
	Slots int
	// Debug logs every FUSE request and reply (very verbose).
	Debug bool
}

// DefaultPoolSlots is how many roots one shared connection serves in its
// life.
const DefaultPoolSlots = 1 << 16

// maxPoolSlots keeps slot numbers within the inode numbers' width.
const maxPoolSlots = 1<<(64-inoBits) - 1

// NewPool starts a pool. Call Close when finished, after closing its
// mounts.
func NewPool(cfg PoolConfig) (*Pool, error) {
	if cfg.Hub == nil {
		return nil, errors.New("fs: a pool needs a hub")
	}
	if cfg.Slots <= 0 {
		cfg.Slots = DefaultPoolSlots
	}
	if cfg.Slots > maxPoolSlots {
		return nil, fmt.Errorf("fs: a pool connection serves at most %d roots", maxPoolSlots)
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	c, err := startCloner()
	if err != nil {
		return nil, err
	}
	return &Pool{cfg: cfg, log: log, clone: c, conns: make(map[*conn]bool)}, nil
}

// conn is one shared FUSE connection of a pool.
type conn struct {
	pool     *Pool
	id       uint64 // its open files' key (serverAcct.id)
	server   *fuse.Server
	mntFd    int // its mount, detached, never attached; closed when let go
	top      *topNode
	requests atomic.Uint64
	done     chan struct{} // closed once its server stopped and its roots were released

	mu     sync.Mutex
	slots  map[string]*root // the roots served, by entry name; guarded by mu
	live   int              // roots not yet released; guarded by mu
	next   uint64           // the next slot number; guarded by mu
	letGo  bool             // its mount's descriptor was closed; guarded by mu
	mntSet bool             // mntFd is valid; guarded by mu
}

// slot is a root's place in its connection.
type slot struct {
	c    *conn
	name string
	m    *Mount

	closing  atomic.Bool // Close was called: a forget of the root releases it
	released sync.Once
}

// topNode is a connection's root folder: its entries are the roots the
// connection serves, by slot number, and nothing else. Only the cloner
// looks them up; no process ever sees the folder itself.
type topNode struct {
	fusefs.Inode
	c *conn
}

var (
	_ fusefs.NodeLookuper  = (*topNode)(nil)
	_ fusefs.NodeGetattrer = (*topNode)(nil)
	_ fusefs.NodeReaddirer = (*topNode)(nil)
)

func (t *topNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fusefs.Inode, syscall.Errno) {
	t.c.mu.Lock()
	r := t.c.slots[name]
	t.c.mu.Unlock()
	if r == nil {
		return nil, syscall.ENOENT
	}
	var st syscall.Stat_t
	if err := fstat(r.fd, &st); err != nil {
		return nil, fusefs.ToErrno(err)
	}
	out.Attr.FromStat(&st)
	out.SetAttrTimeout(r.attrTimeout)
	return t.NewInode(ctx, r.top, r.stable(syscall.S_IFDIR, r.top.ino, r.top.gen)), 0
}

func (t *topNode) Getattr(ctx context.Context, fh fusefs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFDIR | 0o500
	out.Nlink = 2
	return 0
}

func (t *topNode) Readdir(ctx context.Context) (fusefs.DirStream, syscall.Errno) {
	return fusefs.NewListDirStream(nil), 0
}

// Serve serves the folder backing at mountpoint (or onto opts.Target) on
// one of the pool's connections, as Serve does on a connection of its own.
// opts.Hub must be the pool's hub or nil; opts.Transport, Debug, timeouts
// and NoPollHack are the pool's, not the mount's.
func (p *Pool) Serve(ctx context.Context, backing, mountpoint string, opts Options) (*Mount, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if opts.Hub != nil && opts.Hub != p.cfg.Hub {
		return nil, errors.New("fs: a pool's mounts join the pool's hub")
	}
	opts.Hub = p.cfg.Hub
	logger := opts.Logger
	if logger == nil {
		logger = p.log
	}
	r, err := openRoot(backing, opts, logger)
	if err != nil {
		return nil, err
	}
	r.attrTimeout = timeout(opts.AttrTimeout, DefaultAttrTimeout)
	s, err := p.place(r)
	if err != nil {
		r.release()
		return nil, err
	}
	m, err := s.mount(mountpoint, opts)
	if err != nil {
		s.closing.Store(true)
		s.c.unslot(s)
		s.release()
		return nil, fmt.Errorf("fs: mount %s at %s: %w", backing, mountpoint, err)
	}
	r.log.Debug("mounted", "backing", backing, "mountpoint", m.mountpoint, "readonly", opts.ReadOnly, "shared", s.c.id)
	return m, nil
}

// place gives r a slot on the current connection, making a new one when
// there is none or its slots are used up.
func (p *Pool) place(r *root) (*slot, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errors.New("fs: the pool is closed")
	}
	if p.cur == nil || !p.cur.hasRoom() {
		c, err := p.newConn()
		if err != nil {
			return nil, err
		}
		if old := p.cur; old != nil {
			old.retire()
		}
		p.cur = c
		p.conns[c] = true
	}
	return p.cur.add(r), nil
}

// poolMountFlags are the flags of every bind a pool makes, as of a mount
// of its own (Serve): nosymfollow keeps a host process from following an
// agent's link (hostview.go).
const poolMountFlags = uintptr(unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOSYMFOLLOW)

// newConn makes and serves a new shared connection. p.mu must be held.
func (p *Pool) newConn() (*conn, error) {
	c := &conn{pool: p, id: mountIDs.Add(1), slots: make(map[string]*root), next: 1, done: make(chan struct{})}
	c.top = &topNode{c: c}
	entry := DefaultEntryTimeout
	var attr time.Duration
	negative := DefaultNegativeTimeout
	mo := fuse.MountOptions{
		FsName:            "warren:shared-" + strconv.FormatUint(c.id, 10),
		Name:              "warren",
		MaxWrite:          1 << 20,
		EnableLocks:       true,
		ExtraCapabilities: fuse.CAP_ATOMIC_O_TRUNC | fuse.CAP_HANDLE_KILLPRIV_V2 | fuse.CAP_NO_OPENDIR_SUPPORT,
		Logger:            p.log.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Debug}),
		Debug:             p.cfg.Debug,
	}
	if os.Geteuid() == 0 {
		mo.AllowOther = true
		mo.Options = append(mo.Options, "default_permissions")
	}
	fo := &fusefs.Options{
		MountOptions:    mo,
		EntryTimeout:    &entry,
		AttrTimeout:     &attr,
		NegativeTimeout: &negative,
		RootStableAttr:  &fusefs.StableAttr{Ino: fuse.FUSE_ROOT_ID},
		NullPermissions: true,
	}
	fuseFd, mntFd, err := mountDetached(&fo.MountOptions, poolMountFlags)
	if err != nil {
		return nil, fmt.Errorf("fs: make a shared connection: %w", err)
	}
	o := *fo
	acct := &serverAcct{id: c.id, requests: &c.requests, hub: p.cfg.Hub, log: p.log}
	server, err := serveNodesAcct(c.top, fuseFd, &o, TransportClassic, p.log, acct)
	if err != nil {
		unix.Close(mntFd)
		if server.Server != nil {
			server.Serve()
		} else {
			unix.Close(fuseFd)
		}
		return nil, fmt.Errorf("fs: serve a shared connection: %w", err)
	}
	c.server, c.mntFd, c.mntSet = server.Server, mntFd, true
	go c.watch()
	// The poll hack answers for the whole connection: the kernel never
	// asks POLL of any of its roots again (pollhack_linux.go).
	if err := pollHack(mntFd); err != nil {
		c.dissolve()
		<-c.done
		return nil, fmt.Errorf("fs: serve a shared connection: %w", err)
	}
	return c, nil
}

// watch waits for the connection's server to stop, then releases the
// roots still on it and the connection's open-file counts.
func (c *conn) watch() {
	c.server.Wait()
	c.mu.Lock()
	var rest []*root
	for _, r := range c.slots {
		rest = append(rest, r)
	}
	c.mu.Unlock()
	for _, r := range rest {
		r.slot.release()
	}
	c.pool.cfg.Hub.fds.closeMount(c.id)
	c.mu.Lock()
	if c.mntSet {
		unix.Close(c.mntFd)
		c.mntSet = false
	}
	c.mu.Unlock()
	c.pool.mu.Lock()
	delete(c.pool.conns, c)
	if c.pool.cur == c {
		c.pool.cur = nil
	}
	c.pool.mu.Unlock()
	close(c.done)
}

// hasRoom tells whether the connection may take another root.
func (c *conn) hasRoom() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.letGo && c.next <= uint64(c.pool.cfg.Slots)
}

// add gives r the next slot.
func (c *conn) add(r *root) *slot {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.next
	c.next++
	s := &slot{c: c, name: strconv.FormatUint(n, 10)}
	r.inoBase = n << inoBits
	r.slot = s
	c.slots[s.name] = r
	c.live++
	return s
}

// unslot takes s's root out of the top folder: no new lookup finds it.
func (c *conn) unslot(s *slot) {
	c.mu.Lock()
	delete(c.slots, s.name)
	c.mu.Unlock()
	// The kernel drops the entry (and, unused, the root's whole tree,
	// which it then forgets); a bind still in use keeps what it uses.
	// Never beside a clone (cloner.apart).
	c.pool.clone.apart(func() { _ = c.top.NotifyEntry(s.name) })
}

// retire lets the connection go once its last root is released: new
// roots go to a newer one.
func (c *conn) retire() {
	c.mu.Lock()
	c.letGo = true
	idle := c.live == 0
	c.mu.Unlock()
	if idle {
		c.dissolve()
	}
}

// dissolve closes the connection's mount descriptor: with no bind of it
// left, the mount goes, the kernel ends the connection and its server
// stops (watch).
func (c *conn) dissolve() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mntSet {
		unix.Close(c.mntFd)
		c.mntSet = false
	}
}

// mount binds the slot's entry at mountpoint (or onto opts.Target).
func (s *slot) mount(mountpoint string, opts Options) (*Mount, error) {
	r := s.c.slots[s.name]
	targetFd := -1
	if opts.Target != nil {
		targetFd = opts.Target.Fd
	} else {
		fd, err := unix.Open(mountpoint, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("open mount point: %w", err)
		}
		defer unix.Close(fd)
		targetFd = fd
	}
	tree, err := s.c.pool.clone.clone(s.c.mntFd, s.name)
	if err != nil {
		return nil, err
	}
	flags := poolMountFlags
	if opts.ReadOnly {
		flags |= unix.MS_RDONLY
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
		if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr); err != nil {
			unix.Close(tree)
			return nil, fmt.Errorf("make the bind read-only: %w", err)
		}
	}
	if err := moveOnto(tree, targetFd); err != nil {
		unix.Close(tree)
		return nil, err
	}
	if err := checkAttrs(tree, flags); err != nil {
		unix.Unmount(procFdPath(tree), unix.MNT_DETACH)
		unix.Close(tree)
		return nil, err
	}
	m := &Mount{mountpoint: mountpoint, server: s.c.server, transport: TransportClassic, root: r, done: make(chan struct{}), mntFd: tree, atTarget: opts.Target != nil, slot: s}
	if opts.Target == nil {
		// An idle workspace keeps no descriptor of its mount: Close finds
		// it at its path again, by its mount id (Mount.detach).
		id, _, err := MountID(tree)
		if err != nil {
			unix.Unmount(procFdPath(tree), unix.MNT_DETACH)
			unix.Close(tree)
			return nil, err
		}
		unix.Close(tree)
		m.mntFd, m.mntID = -1, id
	}
	s.m = m
	r.hub.add(r)
	return m, nil
}

// forgotten is told that the kernel forgot the slot's root: once it was
// closed, it is served no more.
func (s *slot) forgotten() {
	if s.closing.Load() {
		s.release()
	}
}

// release closes the root's descriptors and leaves the hub, once.
func (s *slot) release() {
	s.released.Do(func() {
		c := s.c
		c.mu.Lock()
		r := c.slots[s.name]
		c.mu.Unlock()
		if r == nil && s.m != nil {
			r = s.m.root
		}
		if r != nil {
			r.fds.closeMount(r.id)
			r.hub.remove(r)
			r.release()
		}
		if s.m != nil {
			close(s.m.done)
		}
		c.mu.Lock()
		delete(c.slots, s.name)
		c.live--
		idle := c.live == 0 && c.letGo
		c.mu.Unlock()
		if idle {
			c.dissolve()
		}
	})
}

// close is Mount.Close for a pool's mount: the bind is detached through
// its descriptor, its entry leaves the top folder, and serving it stops
// once the kernel forgot its root.
func (s *slot) close(m *Mount) error {
	if err := m.detach(); err != nil {
		return err
	}
	s.closing.Store(true)
	s.c.unslot(s)
	if !m.root.top.EmbeddedInode().Forgotten() {
		return nil
	}
	s.release()
	return nil
}

// Close lets every connection of the pool go and waits for their servers
// to stop, at most wait long; mounts not yet closed stop being served.
func (p *Pool) Close(wait time.Duration) error {
	p.mu.Lock()
	p.closed = true
	var cs []*conn
	for c := range p.conns {
		cs = append(cs, c)
	}
	p.mu.Unlock()
	for _, c := range cs {
		c.mu.Lock()
		c.letGo = true
		c.mu.Unlock()
		c.dissolve()
	}
	p.clone.close()
	deadline := time.After(wait)
	for _, c := range cs {
		select {
		case <-c.done:
		case <-deadline:
			return errors.New("fs: pool: a shared connection is still in use")
		}
	}
	return nil
}

// Conns returns how many connections the pool serves on.
func (p *Pool) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}
