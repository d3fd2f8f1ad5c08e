package fs

import (
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// What changed since the last checkpoint. A checkpoint of a workspace
// should cost what changed, not what exists; the filesystem sees every
// change made through its mounts and the file API, so it keeps, per
// workspace folder, the set of paths changed since a caller last took it
// (TakeChanges). A checkpoint takes the set, reads those paths only, and
// commits the set against the checkpoint it made (CommitChanges); the
// next set is then relative to that checkpoint.
//
// The set is complete or it says it is not. It is not complete when it
// was made after changes may have happened (a new change log: a start of
// the daemon, a first mount of the folder), when it overflowed
// (maxChanges), when a change could not be placed (a node no longer
// reachable from the root), or when a file with several names changed
// (its other names changed with it, and which they are is not known).
// The caller then walks the whole folder.
//
// A change is marked after it is made, never before: a checkpoint that
// takes the set between a change and its mark reads the path as it is
// after the change or not at all, and the mark, which lands in the next
// set, makes the next checkpoint read it. Nothing is missed, and a path
// is at most read once too often.
//
// A change made behind the filesystem's back is marked when the ledger
// sees it (a path's fingerprint moved without a modification through the
// filesystem), as versions catch it: at the next open, modification or
// file API call of that path.
//
// The gate makes a checkpoint consistent: every modification of the
// workspace's entries (create, remove, rename, truncate, mode change,
// open for writing, the file API's writes) holds it shared from before
// it takes its path locks until it is marked; Freeze holds it exclusive.
// So while a checkpoint holds Freeze, no entry is made, removed, moved
// or changed, and it reads one state of the tree. Data written through a
// file opened before the freeze is not stopped (with passthrough the
// daemon never sees it): such a file may be read mid-write, and its
// release marks it again for the next checkpoint.

// Change is one changed path of a workspace.
type Change struct {
	// Path is inside the workspace, "/"-separated, without a leading
	// "/"; "" is the workspace's root.
	Path string
	// Tree says that everything below Path may have changed too: a
	// folder was made, moved there or replaced.
	Tree bool
}

// ChangeSet is what changed in a workspace since the set before it was
// taken.
type ChangeSet struct {
	// Changes are sorted by path, each path once.
	Changes []Change
	// Complete is false when changes may be missing from Changes: the
	// whole folder must be read.
	Complete bool
	// Base is what the previous set was committed against
	// (CommitChanges); "" if nothing was.
	Base string
	// Why says, when Complete is false, why not (for the log).
	Why string
}

// maxChanges bounds the paths a change log keeps. Past it the log forgets
// them and says it is not complete: a walk of the folder costs no more
// than reading that many paths.
const maxChanges = 1 << 17

// changeLog is the change set of one workspace folder, shared by every
// mount of the folder and its file API (Hub.changeLogOf).
type changeLog struct {
	id   rootID
	refs int // mounts and Files using it; guarded by the hub's mu

	// gate is held shared by every modification of the folder's entries
	// and exclusive by Freeze. It is taken before any path lock and never
	// held across a kernel notification.
	gate sync.RWMutex
	// blocked, if set, is called by a modification that finds the gate
	// frozen, before it waits (tests).
	blocked atomic.Pointer[func()]

	mu    sync.Mutex
	paths map[string]bool // changed paths: true if the whole tree below; guarded by mu
	lost  string          // why the set is not complete, "" if it is; guarded by mu
	base  string          // what the set is relative to (commit); guarded by mu
	gen   uint64          // counts the set's changes (PendingChanges); guarded by mu
}

// changeLogOf returns the change log of the folder id, made if need be
// (not complete: it did not see what happened before), with one more
// user. Call dropChangeLog when done.
func (h *Hub) changeLogOf(id rootID) *changeLog {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.changes[id]
	if c == nil {
		c = &changeLog{id: id, paths: make(map[string]bool), lost: "the changes were not tracked before"}
		h.changes[id] = c
	}
	c.refs++
	return c
}

// dropChangeLog drops one user of c; the log of a folder nobody uses is
// forgotten (the next one starts not complete).
func (h *Hub) dropChangeLog(c *changeLog) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c.refs--
	if c.refs == 0 && h.changes[c.id] == c {
		delete(h.changes, c.id)
	}
}

// enter holds the gate for one modification; call the returned function
// once the modification is marked.
func (c *changeLog) enter() func() {
	if !c.gate.TryRLock() {
		if f := c.blocked.Load(); f != nil {
			(*f)()
		}
		c.gate.RLock()
	}
	return c.gate.RUnlock
}

// mark records that path changed (tree: and everything below it).
func (c *changeLog) mark(path string, tree bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.paths == nil {
		return // lost: nothing to add to
	}
	if old, seen := c.paths[path]; !seen || tree && !old {
		c.paths[path] = tree || old
		c.gen++
	}
	if len(c.paths) > maxChanges {
		c.loseLocked("more paths changed than the filesystem keeps")
	}
}

// lose forgets the set: the next one taken is not complete.
func (c *changeLog) lose(why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.loseLocked(why)
}

// loseLocked is lose with c.mu held.
func (c *changeLog) loseLocked(why string) {
	if c.lost == "" {
		c.lost = why
		c.gen++
	}
	c.paths = nil
}

// take returns the set and starts a new, complete one: whoever takes a
// set that is not complete reads the whole folder (under Freeze, or at
// least after this point), which covers what was lost.
func (c *changeLog) take() ChangeSet {
	c.mu.Lock()
	defer c.mu.Unlock()
	cs := ChangeSet{Complete: c.lost == "", Base: c.base, Why: c.lost}
	for p, tree := range c.paths {
		cs.Changes = append(cs.Changes, Change{Path: p, Tree: tree})
	}
	slices.SortFunc(cs.Changes, func(a, b Change) int { return strings.Compare(a.Path, b.Path) })
	c.paths, c.lost = make(map[string]bool), ""
	c.gen++
	return cs
}

// giveBack returns a set taken but not used (a checkpoint that failed):
// its changes join the current set, which is not complete if it was not.
func (c *changeLog) giveBack(cs ChangeSet) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !cs.Complete {
		c.loseLocked(cs.Why)
		return
	}
	if c.paths == nil {
		return
	}
	for _, ch := range cs.Changes {
		c.paths[ch.Path] = ch.Tree || c.paths[ch.Path]
	}
	c.gen++
	if len(c.paths) > maxChanges {
		c.loseLocked("more paths changed than the filesystem keeps")
	}
}

// commit says the set taken last is now relative to base.
func (c *changeLog) commit(base string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.base = base
	c.gen++
}

// pathOf returns n's path inside its mount's root ("" for the root), or
// false when n is no longer reachable from the root (removed, or
// forgotten by the kernel).
func (n *node) pathOf() (string, bool) {
	names, ok := n.namesUp(nil)
	if !ok {
		return "", false
	}
	slices.Reverse(names)
	return strings.Join(names, "/"), true
}

// namesUp appends to names the names from n up to its mount's root, n's
// own first (none for the root), or returns false when n is no longer
// reachable from the root.
func (n *node) namesUp(names []string) ([]string, bool) {
	cur, top := n.EmbeddedInode(), n.root.top.EmbeddedInode()
	for cur != top && !cur.IsRoot() {
		name, parent := cur.Parent()
		if parent == nil {
			return nil, false
		}
		names = append(names, name)
		cur = parent
	}
	return names, true
}

// joinPath joins a folder's path inside the root and a name in it.
func joinPath(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// track marks the entry name of the folder dir as changed (tree: and
// everything below it).
func (r *root) track(dir *node, name string, tree bool) {
	p, ok := dir.pathOf()
	if !ok {
		r.changes.lose("a change was made in a folder no longer reachable from the root")
		return
	}
	r.changes.mark(joinPath(p, name), tree)
}

// trackInode marks n's own entry as changed: its content, size or mode.
// The change reached every name of the file: one with several is lost
// track of.
func (r *root) trackInode(n *node) {
	name, dir := n.entryOf()
	if dir == nil {
		if n.isTop() {
			r.changes.mark("", false)
		}
		// A file without a name is in no tree.
		return
	}
	if fd, done, errno := n.use(); errno == 0 {
		var st syscall.Stat_t
		err := fstat(fd, &st)
		done()
		if err == nil && st.Nlink > 1 && st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
			r.changes.lose("a file with several names changed")
			return
		}
	}
	r.track(dir, name, false)
}

// PendingChanges returns what changed in the workspace folder root since
// its last checkpoint, as TakeChanges would, without taking it: for a
// server that tells others what it would lose (gateway/replicas). gen
// counts the set's changes: with since equal to the set's count it
// returns ok false, copying nothing; so does a folder that no mount nor
// Files of this hub serves (nobody tracks its changes). Not for a
// checkpoint: a set taken meanwhile is not in the answer.
func (h *Hub) PendingChanges(root string, since uint64) (cs ChangeSet, gen uint64, ok bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(root, &st); err != nil {
		return ChangeSet{}, 0, false
	}
	h.mu.Lock()
	c := h.changes[rootID{st.Dev, st.Ino}]
	h.mu.Unlock()
	if c == nil {
		return ChangeSet{}, 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen == since {
		return ChangeSet{}, c.gen, false
	}
	cs = ChangeSet{Complete: c.lost == "", Base: c.base, Why: c.lost}
	for p, tree := range c.paths {
		cs.Changes = append(cs.Changes, Change{Path: p, Tree: tree})
	}
	slices.SortFunc(cs.Changes, func(a, b Change) int { return strings.Compare(a.Path, b.Path) })
	return cs, c.gen, true
}

// TakeChanges returns what changed in the workspace since the last
// TakeChanges, and starts a new set. Pass the set to CommitChanges once
// it is recorded, or to ReturnChanges if it could not be.
func (f *Files) TakeChanges() ChangeSet { return f.changes.take() }

// CommitChanges says that the changes taken last are now relative to
// base (a checkpoint's id): the next ChangeSet's Base.
func (f *Files) CommitChanges(base string) { f.changes.commit(base) }

// ReturnChanges gives back a set taken but not recorded: its changes join
// the next set.
func (f *Files) ReturnChanges(cs ChangeSet) { f.changes.giveBack(cs) }

// Freeze stops every modification of the workspace's entries, through
// any mount or the file API, until the returned function is called; it
// waits for the modifications under way to end. Hold it to read one
// state of the tree; never make a change of the workspace, and never
// wait on a request to its mounts, while holding it.
func (f *Files) Freeze() (thaw func()) {
	f.changes.gate.Lock()
	return f.changes.gate.Unlock
}

// relOf returns where the folder dfd is inside the workspace, by the
// kernel's own name for it, whatever links the file API followed to reach
// it; false if it is not below the workspace's root any more.
func (f *Files) relOf(dfd int) (string, bool) {
	root, err := os.Readlink(procFdPath(f.fd))
	if err != nil {
		return "", false
	}
	dir, err := os.Readlink(procFdPath(dfd))
	if err != nil {
		return "", false
	}
	if dir == root {
		return "", true
	}
	rest, ok := strings.CutPrefix(dir, root+"/")
	if !ok || root == "/" {
		return "", false
	}
	return rest, true
}

// track marks the file API's target t as changed (tree: and everything
// below it).
func (f *Files) track(t *target, tree bool) {
	dir, ok := f.relOf(t.dirFd)
	if !ok {
		f.changes.lose("a change was made in a folder no longer reachable from the root")
		return
	}
	f.changes.mark(joinPath(dir, t.name), tree)
}

// trackMade marks the folder name, just made in the folder dfd.
func (f *Files) trackMade(dfd int, name string) {
	dir, ok := f.relOf(dfd)
	if !ok {
		f.changes.lose("a change was made in a folder no longer reachable from the root")
		return
	}
	f.changes.mark(joinPath(dir, name), true)
}
