package fs

import (
	"context"
	"strings"
	"syscall"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// How the mounts use the ledger (ledger.go). Every operation that changes
// a path takes the path's lock, brings its version up to date, refuses an
// actor whose read is older, does the change, and records the new version
// as seen by that actor. An open for reading records the version read.
// The actor is resolved here, at open, create, setattr, rename and
// unlink; an open file carries its actor and path to its release, so
// reads and writes in between cost nothing.

// Stale describes a modification refused because its actor read the file
// before its last change.
type Stale struct {
	Mount string // Options.Name, or the file API's label
	Op    string // "open", "create", "truncate", "rename", "unlink", "link", ...
	Path  string // inside the root, "/"-separated, without a leading "/"
	Actor Actor
}

// Message is what the agent is told.
func (s Stale) Message() string {
	return (&StaleError{Path: s.Path, Actor: s.Actor}).Error()
}

// guarded is one path taken for an operation: its key and locked state.
type guarded struct {
	key   pathKey
	state *pathState
	// moved says the path's version moved when it was taken: it changed
	// behind the filesystem's back, or through a handle open for
	// writing, since the ledger last looked (changes.go marks it).
	moved bool
}

// actorOf returns the actor of the request in ctx.
func (r *root) actorOf(ctx context.Context) Actor {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return Actor{}
	}
	return r.hub.actors.of(c.Pid)
}

// entryOf returns the directory and name through which the kernel reached
// n, or nil for the root and for a file with no name left.
func (n *node) entryOf() (string, *node) {
	name, p := n.Parent()
	if p == nil {
		return "", nil
	}
	dir, ok := p.Operations().(*node)
	if !ok {
		return "", nil
	}
	return name, dir
}

// key is the ledger's key of name in the directory n.
func (n *node) key(name string) pathKey {
	return pathKey{dev: n.root.dev, dir: n.ino, gen: n.gen, name: name}
}

// fingerprintAt returns what name in the directory dfd holds now; the
// zero fingerprint if nothing.
func fingerprintAt(dfd int, name string) (fingerprint, error) {
	var st syscall.Stat_t
	if err := fstatat(dfd, name, &st); err != nil {
		if err == unix.ENOENT {
			return fingerprint{}, nil
		}
		return fingerprint{}, err
	}
	return fingerprintOf(&st), nil
}

// fingerprintFd returns what the open file fd holds now.
func fingerprintFd(fd int) fingerprint {
	var st syscall.Stat_t
	if fstat(fd, &st) != nil {
		return fingerprint{}
	}
	return fingerprintOf(&st)
}

// refresh brings the version of g, the entry name in the directory dfd,
// up to date with what it holds now, and says whether it moved. g's lock
// is held.
func (l *ledger) refresh(g guarded, dfd int, name string) (moved bool, err error) {
	fp, err := fingerprintAt(dfd, name)
	if err != nil {
		return false, err
	}
	known, v := g.state.known, g.state.version
	l.current(g.key, g.state, fp)
	return known && g.state.version != v, nil
}

// take locks k, the entry name in the directory dfd, and brings its
// version up to date. Call the returned unlock when done.
func (l *ledger) take(k pathKey, dfd int, name string) (guarded, func(), error) {
	st, _, unlock := l.lock(k)
	g := guarded{key: k, state: st}
	moved, err := l.refresh(g, dfd, name)
	if err != nil {
		unlock()
		return guarded{}, nil, err
	}
	g.moved = moved
	return g, unlock, nil
}

// take locks name in the directory n (dfd is n's descriptor) and brings
// its version up to date. Call the returned unlock when done.
func (n *node) take(dfd int, name string) (guarded, func(), syscall.Errno) {
	g, unlock, err := n.root.hub.ledger.take(n.key(name), dfd, name)
	if err != nil {
		return guarded{}, nil, fusefs.ToErrno(err)
	}
	if g.moved {
		n.root.track(n, name, g.state.fp.dir)
		n.root.changedAt(Changed, n, name, g.state.soleWriter(), g.state.version)
	}
	return g, unlock, 0
}

// takeEntry gets what a modification of name in the directory n needs:
// the workspace's change gate (changes.go), the directory's descriptor,
// the request's actor, and the name taken (take). Call release when done,
// after the change is marked.
func (n *node) takeEntry(ctx context.Context, name string) (dfd int, a Actor, g guarded, release func(), errno syscall.Errno) {
	leave := n.root.changes.enter()
	dfd, done, errno := n.use()
	if errno != 0 {
		leave()
		return -1, Actor{}, guarded{}, nil, errno
	}
	a = n.root.actorOf(ctx)
	g, unlock, errno := n.take(dfd, name)
	if errno != 0 {
		done()
		leave()
		return -1, Actor{}, guarded{}, nil, errno
	}
	return dfd, a, g, func() { unlock(); done(); leave() }, 0
}

// refuseStale reports whether a modification of g by actor a must be
// refused because a read it before its last change; the first refusal
// at a version is logged and told to onStale. s names the operation.
func (l *ledger) refuseStale(log hclog.Logger, onStale func(Stale), s Stale, g guarded) bool {
	stale, first := l.stale(s.Actor, g.key, g.state)
	if stale && first {
		log.Warn("refused a write based on a stale read", "op", s.Op, "path", s.Path, "actor", s.Actor.String())
		if onStale != nil {
			onStale(s)
		}
	}
	return stale
}

// refuseIfStale refuses a modification of g by actor a that read it
// before its last change.
func (r *root) refuseIfStale(op, path string, a Actor, g guarded) syscall.Errno {
	s := Stale{Mount: r.name, Op: op, Path: strings.TrimPrefix(path, "/"), Actor: a}
	if r.hub.ledger.refuseStale(r.log, r.onStale, s, g) {
		return syscall.ESTALE
	}
	return 0
}

// modified records a change of g by a; the path now holds fp (nothing:
// removed).
func (r *root) modified(a Actor, g guarded, fp fingerprint) {
	if fp == (fingerprint{}) {
		r.hub.ledger.removed(a, g.key, g.state)
		return
	}
	r.hub.ledger.modified(a, g.key, g.state, fp)
}

// writer is what a handle that may write carries from its open: its
// actor and path, resolved once.
type writer struct {
	closing  func(fd int)
	lockPath func() func()
}

// newWriter notes an open handle of a on the path g of node n (the
// ledger counts it until the handle's release) and returns its guard.
//
// At release the path's version moves again (the daemon did not see the
// writes passed through), and the writer's record with it. The kernel of
// the handle's mount saw those writes (passthrough updates its size), so
// it stays told.
func (r *root) newWriter(n *node, a Actor, g guarded) *writer {
	l, k := r.hub.ledger, g.key
	l.openWriter(a, g.state)
	return &writer{
		closing: func(fd int) {
			st, _, unlock := l.lock(k)
			l.closeWriter(a, k, st, fingerprintFd(fd))
			n.told(st.version)
			// What the handle wrote, passed through or not, is told at
			// its close (and by each write the daemon serves).
			r.changedNode(n, a, st.version)
			unlock()
		},
		lockPath: func() func() {
			_, _, unlock := l.lock(k)
			return unlock
		},
	}
}
