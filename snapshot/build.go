package snapshot

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/progress"
)

// The phases Build and Apply report their progress in (package progress).
const (
	PhaseRead  = "read"  // Build: files and links read from the workspace
	PhaseWrite = "write" // Apply: changes made to the workspace
)

// Change names a path of the workspace that may have changed since the
// base tree of a Build.
type Change struct {
	Path string // relative to the workspace root, "/"-separated, no leading "/"; "" is the root
	Tree bool   // everything below Path may have changed (a folder made, moved in, or unknown)
}

// BuildStats says what a Build found and did. The totals are those of
// the whole resulting tree, whether the build walked it or reused parts
// of its base (the root folder is not counted in Dirs).
type BuildStats struct {
	Full               bool  // a full walk was made
	Files, Links, Dirs int64 // in the resulting tree
	Bytes              int64 // content bytes of the files in the resulting tree
	Read               int64 // files and links read during this build
	BytesRead          int64 // content bytes read during this build: a sparse file's data, never its holes
	NewObjects         int64 // objects written (not found in place already)
	NewBytes           int64 // bytes written to the build's log (records' headers included)
}

// examineTries bounds how often an entry that turns into something else
// between its lstat and its open is looked at again; one that keeps
// changing is left out of the tree.
const examineTries = 8

// Build stores the folder rootFd (a descriptor of the workspace's backing
// folder, O_PATH or not) as a tree and returns its hash, once every object
// it wrote is durable: its new objects go to one log in tmp/, fsync'ed
// once, and are readable at once; the Repo's spreader makes them loose
// objects later (see the package doc). Call it holding Shared.
//
// With full, or a zero base, it walks the whole folder. Otherwise it
// starts from the tree base and looks again only at the paths in
// changes, and at the folders on the way to them: a path gone is dropped
// with everything below it; a file's content and a link's target are
// stored again; a folder marked Tree, or not a folder in base, is walked
// whole; any other folder keeps its base subtree, with its mode updated
// and the changes below it applied. Changes may come in any order, repeat
// and overlap; one below a path that is no longer a folder is ignored.
// Subtrees on no changed path are reused by hash, unread.
//
// Entries the skip rule names (WithSkip; DefaultSkip), fifos, sockets and
// devices, mounts and everything on another filesystem are left out. An
// entry that vanishes while it is read is left out, not an error.
//
// It reports its progress to ctx's progress.Func, if any, as phase
// "read": the files and links read so far, of a total it does not know.
func (r *Repo) Build(ctx context.Context, rootFd int, base Hash, changes []Change, full bool) (Hash, BuildStats, error) {
	var st unix.Stat_t
	if err := fstat(rootFd, &st); err != nil {
		return Hash{}, BuildStats{}, fmt.Errorf("snapshot: build: stat the root: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return Hash{}, BuildStats{}, fmt.Errorf("snapshot: build: the root is not a folder")
	}
	b := &builder{r: r, ctx: ctx, report: progress.Of(ctx)}
	var trie *changeNode
	if !full && !base.IsZero() {
		var err error
		if trie, err = makeTrie(changes); err != nil {
			return Hash{}, BuildStats{}, fmt.Errorf("snapshot: build: %w", err)
		}
		full = trie.tree
	}
	full = full || base.IsZero()

	var h Hash
	var c counts
	var err error
	if full {
		var fd int
		fd, err = openAt(rootFd, ".", unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			return Hash{}, BuildStats{}, fmt.Errorf("snapshot: build: open the root: %w", err)
		}
		h, c, err = b.walk(fd, "")
		unix.Close(fd)
	} else {
		h, c, err = b.update(rootFd, "", base, trie)
	}
	if err == nil && b.ws.log != nil {
		err = b.ws.log.commit(r.tmpFd)
	}
	if err != nil {
		if b.ws.log != nil {
			b.ws.log.abort(r.tmp)
		}
		return Hash{}, BuildStats{}, fmt.Errorf("snapshot: build: %w", err)
	}
	if b.ws.log != nil {
		r.publish(b.ws.log)
	}
	return h, BuildStats{
		Full:       full,
		Files:      c.files,
		Links:      c.links,
		Dirs:       c.dirs,
		Bytes:      c.bytes,
		Read:       b.read,
		BytesRead:  b.bytes,
		NewObjects: b.ws.newObjects,
		NewBytes:   b.ws.newBytes,
	}, nil
}

// changeNode is a folder or entry on a changed path; the root node is the
// workspace root. Every node is looked at again, not only the marked ones:
// a folder on the way to a change may have changed as well.
type changeNode struct {
	tree bool                   // everything below may have changed
	kids map[string]*changeNode // changed paths below
}

// makeTrie gathers changes into a tree of changeNodes.
func makeTrie(changes []Change) (*changeNode, error) {
	root := &changeNode{}
	for _, c := range changes {
		n := root
		if c.Path != "" {
			for name := range strings.SplitSeq(c.Path, "/") {
				if !validName(name) {
					return nil, fmt.Errorf("change %q: not a clean relative path", c.Path)
				}
				k := n.kids[name]
				if k == nil {
					k = &changeNode{}
					if n.kids == nil {
						n.kids = make(map[string]*changeNode)
					}
					n.kids[name] = k
				}
				n = k
			}
		}
		n.tree = n.tree || c.Tree
	}
	return root, nil
}

// builder is one Build's state; one goroutine uses it.
type builder struct {
	r       *Repo
	ctx     context.Context
	report  progress.Func // told of each file or link read
	ws      writeSet
	read    int64 // files and links read
	depth   int   // folders open below the root
	entries int64 // names listed or looked at again (Limits.Entries)
	bytes   int64 // content bytes read (Limits.Bytes)
}

func join(rel, name string) string {
	if rel == "" {
		return name
	}
	return rel + "/" + name
}

// walk stores the whole folder fd (opened O_RDONLY), at rel in the
// workspace, and returns its tree's hash and counts.
func (b *builder) walk(fd int, rel string) (Hash, counts, error) {
	names, err := listDir(fd)
	if err != nil {
		return Hash{}, counts{}, fmt.Errorf("list %q: %w", rel, err)
	}
	if err := b.countEntries(len(names)); err != nil {
		return Hash{}, counts{}, fmt.Errorf("list %q: %w", rel, err)
	}
	t := make(Tree, 0, len(names))
	var sum counts
	for _, name := range names {
		if b.r.skip(name) || !validName(name) {
			continue
		}
		e, c, ok, err := b.examine(fd, join(rel, name), name, nil, nil)
		if err != nil {
			return Hash{}, counts{}, err
		}
		if ok {
			t = append(t, e)
			sum.add(c)
		}
	}
	h, err := b.r.putTree(&b.ws, t, sum)
	return h, sum, err
}

// update applies the changes below node to the tree base of the folder fd
// (O_PATH will do), at rel in the workspace, and returns the new tree's
// hash and counts.
func (b *builder) update(fd int, rel string, base Hash, node *changeNode) (Hash, counts, error) {
	obj, err := b.r.tree(base)
	if err != nil {
		return Hash{}, counts{}, fmt.Errorf("read base of %q: %w", rel, err)
	}
	if len(node.kids) == 0 {
		return base, obj.sum, nil
	}
	t := slices.Clone(obj.entries)
	sum := obj.sum
	changed := false
	for _, name := range slices.Sorted(maps.Keys(node.kids)) {
		i, found := t.Find(name)
		var old *Entry
		var oldC counts
		if found {
			old = &Entry{}
			*old = t[i]
			if oldC, err = b.contribution(*old); err != nil {
				return Hash{}, counts{}, fmt.Errorf("read base of %q: %w", join(rel, name), err)
			}
		}
		if err := b.countEntries(1); err != nil {
			return Hash{}, counts{}, fmt.Errorf("%q: %w", join(rel, name), err)
		}
		var e Entry
		var c counts
		ok := false
		if !b.r.skip(name) {
			e, c, ok, err = b.examine(fd, join(rel, name), name, old, node.kids[name])
			if err != nil {
				return Hash{}, counts{}, err
			}
		}
		switch {
		case ok && found:
			if e != t[i] {
				t[i] = e
				changed = true
			}
		case ok:
			t = slices.Insert(t, i, e)
			changed = true
		case found:
			t = slices.Delete(t, i, i+1)
			changed = true
		}
		sum.sub(oldC)
		sum.add(c)
	}
	if !changed {
		return base, obj.sum, nil
	}
	h, err := b.r.putTree(&b.ws, t, sum)
	return h, sum, err
}

// contribution returns what the entry e adds to its folder's counts.
func (b *builder) contribution(e Entry) (counts, error) {
	if e.Kind != KindDir {
		return contribution(e, counts{}), nil
	}
	obj, err := b.r.tree(e.Hash)
	if err != nil {
		return counts{}, err
	}
	return contribution(e, obj.sum), nil
}

// examine looks at name in the folder dirfd (at rel in the workspace) and
// returns its entry and what it adds to the folder's counts, or ok false
// where it is to be left out. base is its entry in the base tree (nil for
// none), node its change (nil in a full walk). The entry is opened after
// its lstat: one that has changed kind meanwhile is looked at again.
func (b *builder) examine(dirfd int, rel, name string, base *Entry, node *changeNode) (e Entry, c counts, ok bool, err error) {
	if err := b.ctx.Err(); err != nil {
		return Entry{}, counts{}, false, err
	}
	for range examineTries {
		var st unix.Stat_t
		if err := lstatAt(dirfd, name, &st); err != nil {
			if err == unix.ENOENT {
				return Entry{}, counts{}, false, nil
			}
			return Entry{}, counts{}, false, fmt.Errorf("lstat %q: %w", rel, err)
		}
		if b.r.hook != nil {
			b.r.hook("examine", rel)
		}
		var again bool
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			e, ok, again, err = b.file(dirfd, rel, name)
		case unix.S_IFLNK:
			e, ok, again, err = b.link(dirfd, rel, name)
		case unix.S_IFDIR:
			e, c, ok, again, err = b.dir(dirfd, rel, name, base, node)
		default:
			return Entry{}, counts{}, false, nil // fifo, socket, device
		}
		if err != nil || !again {
			if ok && e.Kind != KindDir {
				c = contribution(e, counts{})
			}
			return e, c, ok, err
		}
	}
	return Entry{}, counts{}, false, nil
}

// gone reports whether an open's error means the entry is not to be
// stored: it is gone (ENOENT) or a mount (EXDEV).
func gone(err error) bool { return isErrno(err, unix.ENOENT, unix.EXDEV) }

// turned reports whether an open's error means the entry is no longer
// what its lstat said: a symlink now (ELOOP), a folder or not one
// (EISDIR, ENOTDIR), a socket (ENXIO), a device that refuses (ENODEV...).
func turned(err error) bool {
	return isErrno(err, unix.ELOOP, unix.EISDIR, unix.ENOTDIR, unix.ENXIO, unix.ENODEV, unix.ETXTBSY)
}

// file stores the regular file name. again: it is not a regular file any
// more; look again.
func (b *builder) file(dirfd int, rel, name string) (e Entry, ok, again bool, err error) {
	// O_NONBLOCK: a fifo swapped in opens at once instead of waiting for
	// a writer (and is then seen by fstat). O_NOATIME: reading the
	// workspace changes nothing in it (root owns that right; others fall
	// back).
	flags := unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_NOATIME
	var fd int
	for tries := 0; ; tries++ {
		fd, err = openAt(dirfd, name, flags)
		if err == unix.EPERM && flags&unix.O_NOATIME != 0 {
			flags &^= unix.O_NOATIME
			continue
		}
		// EWOULDBLOCK: a lease holder is told to let go; give it a moment.
		if err == unix.EWOULDBLOCK && tries < 20 {
			if err := sleepCtx(b.ctx, 10*time.Millisecond); err != nil {
				return Entry{}, false, false, err
			}
			continue
		}
		break
	}
	switch {
	case err == nil:
	case gone(err):
		return Entry{}, false, false, nil
	case turned(err):
		return Entry{}, false, true, nil
	default:
		return Entry{}, false, false, fmt.Errorf("open %q: %w", rel, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := fstat(fd, &st); err != nil {
		return Entry{}, false, false, fmt.Errorf("stat %q: %w", rel, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return Entry{}, false, true, nil
	}
	// What is read counts against the build's limit as it is read
	// (budgetReader adds to b.bytes), holes never.
	h, sparse, size, _, err := b.r.putFile(&b.ws, fd, st.Size, st.Blocks, func(rd io.Reader) io.Reader { return budgetReader{rd, b} })
	if err != nil {
		return Entry{}, false, false, fmt.Errorf("store %q: %w", rel, err)
	}
	b.read++
	b.report(progress.Frame{Done: b.read, Phase: PhaseRead})
	return Entry{Name: name, Kind: KindFile, Mode: st.Mode & 0o7777, Size: size, Hash: h, Sparse: sparse}, true, false, nil
}

// link stores the target of the symlink name. again: it is not a symlink
// any more.
func (b *builder) link(dirfd int, rel, name string) (e Entry, ok, again bool, err error) {
	target, err := readlinkAt(dirfd, name)
	switch {
	case err == nil:
	case err == unix.ENOENT:
		return Entry{}, false, false, nil
	case err == unix.EINVAL:
		return Entry{}, false, true, nil
	default:
		return Entry{}, false, false, fmt.Errorf("read link %q: %w", rel, err)
	}
	if target == "" {
		return Entry{}, false, false, nil // no such link can be made; leave it out
	}
	b.bytes += int64(len(target))
	h, err := b.r.putBytes(&b.ws, []byte(target))
	if err != nil {
		return Entry{}, false, false, fmt.Errorf("store link %q: %w", rel, err)
	}
	b.read++
	b.report(progress.Frame{Done: b.read, Phase: PhaseRead})
	return Entry{Name: name, Kind: KindLink, Size: int64(len(target)), Hash: h}, true, false, nil
}

// dir stores the folder name: whole, or as an update of its base tree
// where it was a folder in base and is not marked Tree. again: it is not
// a folder any more.
func (b *builder) dir(dirfd int, rel, name string, base *Entry, node *changeNode) (e Entry, c counts, ok, again bool, err error) {
	fd, err := openAt(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY)
	switch {
	case err == nil:
	case gone(err):
		return Entry{}, counts{}, false, false, nil
	case turned(err):
		return Entry{}, counts{}, false, true, nil
	default:
		return Entry{}, counts{}, false, false, fmt.Errorf("open %q: %w", rel, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := fstat(fd, &st); err != nil {
		return Entry{}, counts{}, false, false, fmt.Errorf("stat %q: %w", rel, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return Entry{}, counts{}, false, true, nil
	}
	if b.depth >= b.r.limits.Depth {
		return Entry{}, counts{}, false, false, fmt.Errorf("%q: %w", rel, &LimitError{Limit: "depth", Max: int64(b.r.limits.Depth)})
	}
	b.depth++
	defer func() { b.depth-- }()
	var h Hash
	if node == nil || node.tree || base == nil || base.Kind != KindDir {
		h, c, err = b.walk(fd, rel)
	} else {
		h, c, err = b.update(fd, rel, base.Hash, node)
	}
	if err != nil {
		return Entry{}, counts{}, false, false, err
	}
	e = Entry{Name: name, Kind: KindDir, Mode: st.Mode & 0o7777, Hash: h}
	return e, contribution(e, c), true, false, nil
}

// sleepCtx waits d, or less if ctx ends first.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
