package fs

import "strings"

// Changes told as they happen. Every change of an entry through a mount or
// the file API is told to the mount's (Options.OnChange) or the Files'
// (Files.WatchChanges) callback, with the actor that made it and the
// path's version after it: the gateway turns them into file events. A
// change found behind the filesystem's back (a file changed under the
// backing folder) is told when the filesystem sees it, with no actor.
//
// The path is computed only when the callback's want says someone listens:
// a change costs nothing more than a nil check otherwise. The callback is
// called with the path's lock held: it must only queue (the gateway's
// coalescer takes a leaf lock).

// ChangeKind is what happened to an entry.
type ChangeKind string

const (
	Created ChangeKind = "created"
	Changed ChangeKind = "changed" // its content, size, mode or times
	Removed ChangeKind = "removed"
	Renamed ChangeKind = "renamed" // From is the old path, Path the new
)

// EntryChange is one change of an entry, as it happens.
type EntryChange struct {
	Kind ChangeKind
	// Path is the entry's path inside the workspace, "/"-separated and
	// starting with "/"; From is the old one of a rename.
	Path, From string
	// Actor made the change; none for one found behind the filesystem's
	// back.
	Actor Actor
	// Version is the path's version after the change.
	Version uint64
}

// watcher is a change callback and what says whether anyone listens.
type watcher struct {
	onChange func(EntryChange)
	want     func() bool // nil: always
}

func (w watcher) active() bool {
	return w.onChange != nil && (w.want == nil || w.want())
}

// changedAt tells the mount's watcher that name in dir changed.
func (r *root) changedAt(kind ChangeKind, dir *node, name string, a Actor, version uint64) {
	if !r.watch.active() {
		return
	}
	p, ok := dir.slashPath(name)
	if !ok {
		return
	}
	r.watch.onChange(EntryChange{Kind: kind, Path: p, Actor: a, Version: version})
}

// changedNode tells the mount's watcher that n's content or attributes
// changed.
func (r *root) changedNode(n *node, a Actor, version uint64) {
	if !r.watch.active() {
		return
	}
	name, dir := n.entryOf()
	if dir == nil {
		return // the root, or a file without a name
	}
	r.changedAt(Changed, dir, name, a, version)
}

// renamedAt tells the mount's watcher of a rename.
func (r *root) renamedAt(fromDir *node, fromName string, toDir *node, toName string, a Actor, version uint64) {
	if !r.watch.active() {
		return
	}
	from, ok1 := fromDir.slashPath(fromName)
	to, ok2 := toDir.slashPath(toName)
	if !ok1 || !ok2 {
		return
	}
	r.watch.onChange(EntryChange{Kind: Renamed, From: from, Path: to, Actor: a, Version: version})
}

// slashPath is the path of the entry name in dir as a change tells it:
// "/" and the names from the root down, built in one allocation, since
// it is built for every change a reader follows (an untar: every file).
// ok is false for a folder no longer in the tree.
func (dir *node) slashPath(name string) (string, bool) {
	var stack [32]string // deeper trees spill to the heap
	names, ok := dir.namesUp(stack[:0])
	if !ok {
		return "", false
	}
	size := 1 + len(name)
	for _, n := range names {
		size += 1 + len(n)
	}
	var b strings.Builder
	b.Grow(size)
	for i := len(names) - 1; i >= 0; i-- {
		b.WriteByte('/')
		b.WriteString(names[i])
	}
	b.WriteByte('/')
	b.WriteString(name)
	return b.String(), true
}

// WatchChanges sets the file API's change callback (see EntryChange); want, if
// set, says whether anyone listens. Call it before the Files is used.
func (f *Files) WatchChanges(onChange func(EntryChange), want func() bool) {
	f.watch = watcher{onChange, want}
}

// changedAt tells the Files' watcher that the entry at rel changed.
func (f *Files) changedAt(kind ChangeKind, rel string, a Actor, version uint64) {
	if f.watch.active() {
		f.watch.onChange(EntryChange{Kind: kind, Path: slashed(rel), Actor: a, Version: version})
	}
}

// slashed is rel with a leading "/".
func slashed(rel string) string {
	if len(rel) > 0 && rel[0] == '/' {
		return rel
	}
	return "/" + rel
}
