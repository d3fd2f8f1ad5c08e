package fs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Links are where a workspace could leak: a symlink names a place, and the
// kernel, not this daemon, walks to it, from the folder it came through,
// after the daemon answered its readlink. No answer given at readlink time
// can bind that walk: a hard link gives a link two folders, a folder can
// move during the walk, another link on the way can change. So:
//
//   - Every mount is made nosymfollow (MS_NOSYMFOLLOW): the kernel follows
//     no link in a host's view of a workspace at all (ELOOP), whatever the
//     agent made. That is the boundary for host processes. The jail binds
//     the mount without the flag, so links work inside it, where a link
//     leading above /workspace reaches only the jail's own read-only root.
//   - The link check below stays as defence in depth, for the jail's view
//     and for any view that lost the flag: a symlink is judged by where the
//     kernel would end up when it is made, when a rename carries it to
//     another folder, and every time it is read. Any doubt in the check
//     counts as "leads out".
//   - A symlink has one name only: hard links of symlinks are refused, and
//     a symlink found with more than one name (made behind the
//     filesystem's back) is refused when read. So the folder the check
//     starts from is the only folder the kernel can come through.

// maxLinkHops bounds how many symlinks one check follows, as the kernel
// bounds a walk (40). A longer chain counts as leading out.
const maxLinkHops = 40

// maxLinkDepth bounds how deep below the root a link's folder may be for
// the check to place it (by climbing ".." to the root). Deeper counts as
// leading out: no real tree is 4096 folders deep.
const maxLinkDepth = 4096

// A rename to another folder checks every symlink in the moved tree from
// its new place. The walk is bounded: a tree with more entries, or deeper,
// than this is not renamed but refused with EXDEV, the answer for "cannot
// rename across here": mv(1) and most tools then copy the tree and remove
// the original, and the copy makes every link again through Symlink,
// which checks each. EPERM would end such a move for good.
const (
	maxMovedEntries = 100_000
	maxMovedDepth   = 256
)

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fusefs.Inode, syscall.Errno) {
	if errno := n.mayModify(name); errno != 0 {
		return nil, errno
	}
	dfd, done, errno := n.use()
	if errno != 0 {
		return nil, errno
	}
	why := n.root.judge().escapesFrom(dfd, target, nil)
	done()
	if why != "" {
		n.root.refuse("symlink", n.child(name), target, why)
		return nil, syscall.EPERM
	}
	return n.makeEntry(ctx, name, out, 0, true, func(dfd int) error {
		return unix.Symlinkat(target, dfd, name)
	})
}

// Readlink returns a link's target only if following it stays inside the
// root. A host's view never follows links (nosymfollow); inside the jail
// the kernel follows a link by asking for its target here, so refusing
// the read refuses the walk.
func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	fd, done, errno := n.use()
	if errno != 0 {
		return nil, errno
	}
	defer done()
	target, err := readlinkFd(fd)
	if err != nil {
		return nil, fusefs.ToErrno(err)
	}
	if why := n.linkEscapes(fd, target); why != "" {
		n.root.refuse("readlink", n.rel(), target, why)
		return nil, syscall.EPERM
	}
	return []byte(target), 0
}

// linkEscapes judges the symlink n (fd is its descriptor) from the one
// folder that holds it.
func (n *node) linkEscapes(fd int, target string) string {
	var st syscall.Stat_t
	if err := fstat(fd, &st); err != nil {
		return fmt.Sprintf("cannot stat the link: %v", err)
	}
	if st.Nlink > 1 {
		// Made behind the filesystem's back: the kernel could come
		// through a folder the check does not know.
		return "a symlink with more than one name"
	}
	name, p := n.Parent()
	if p == nil {
		return "the link's folder is not known"
	}
	dir, ok := p.Operations().(*node)
	if !ok {
		return "the link's folder is not known"
	}
	dfd, done, errno := dir.use()
	if errno != 0 {
		return fmt.Sprintf("cannot open the link's folder: %v", errno)
	}
	defer done()
	// The folder go-fuse knows must hold this very link under that name:
	// then the check starts where the kernel does.
	var cur syscall.Stat_t
	if err := fstatat(dfd, name, &cur); err != nil || cur.Ino != st.Ino || cur.Dev != st.Dev {
		return "the link is no longer where it was looked up"
	}
	return n.root.judge().escapesFrom(dfd, target, nil)
}

// Link makes a hard link. The kernel only hands us inodes of this same
// mount, so a file from outside the root can never be linked in. A symlink
// gets no second name: the kernel would follow it from either folder.
func (n *node) Link(ctx context.Context, target fusefs.InodeEmbedder, name string, out *fuse.EntryOut) (*fusefs.Inode, syscall.Errno) {
	t, ok := target.(*node)
	if !ok || t.root != n.root {
		n.root.refuse("link", n.child(name), "", "the source is not in this workspace")
		return nil, syscall.EXDEV
	}
	if errno := n.mayModify(name); errno != 0 {
		return nil, errno
	}
	if t.IsDir() {
		return nil, syscall.EPERM
	}
	if t.isSymlink() {
		n.root.refuse("link", n.child(name), t.rel(), "a symlink may have only one name")
		return nil, syscall.EPERM
	}
	tfd, tdone, errno := t.use()
	if errno != 0 {
		return nil, errno
	}
	defer tdone()
	ch, errno := n.makeEntry(ctx, name, out, 0, false, func(dfd int) error {
		return unix.Linkat(tfd, "", dfd, name, unix.AT_EMPTY_PATH)
	})
	if errno == 0 {
		n.root.changedInode(t) // its link count
		t.relinked()
	}
	return ch, errno
}

// relinked tells the ledger that the file n, reached through its name,
// got another name: its ctime moved, its content did not.
func (n *node) relinked() {
	name, dir := n.entryOf()
	if dir == nil {
		return
	}
	dfd, done, errno := dir.use()
	if errno != 0 {
		return
	}
	defer done()
	k := dir.key(name)
	l := n.root.hub.ledger
	st, _, unlock := l.lock(k)
	defer unlock()
	if fp, err := fingerprintAt(dfd, name); err == nil && fp.ino == st.fp.ino && fp.size == st.fp.size {
		l.touched(st, fp)
	}
}

// placement is where a rename being checked puts one entry: the walk of a
// link target sees the tree as it will be after the rename.
type placement struct {
	ino               uint64 // the entry that moves
	fromDir, toDir    uint64 // the folders it leaves and enters (inodes)
	fromName, toName  string
	fd                int // the entry's descriptor; borrowed
	toDirFd, toDepth  int // the folder it enters: descriptor (borrowed) and depth
	isDir, isSymlink  bool
	fromPath, newPath string // for refusals
}

// checkMove refuses a rename of the entry name of n to newName in np (np
// is another folder than n) if it would carry a symlink to where it leads
// out (linkJudge.checkMove).
func (n *node) checkMove(name string, np *node, newName string, flags uint32) syscall.Errno {
	sfd, sdone, errno := n.use()
	if errno != 0 {
		return errno
	}
	defer sdone()
	dfd, ddone, errno := np.use()
	if errno != 0 {
		return errno
	}
	defer ddone()
	from := moveEnd{dirFd: sfd, name: name, path: n.child(name)}
	to := moveEnd{dirFd: dfd, name: newName, path: np.child(newName)}
	return n.root.judge().checkMove(from, to, flags&unix.RENAME_EXCHANGE != 0)
}

// linkJudge judges symlinks against one workspace's root, for a mount or
// for the file API: the walks of this file, each refusal logged (and
// reported) by refuse.
type linkJudge struct {
	root   int // the root's descriptor; borrowed
	refuse func(op, path, target, reason string)
}

// judge returns the mount's link judge.
func (r *root) judge() linkJudge { return linkJudge{root: r.fd, refuse: r.refuse} }

// moveEnd is one end of a rename being checked: the entry name in the
// folder dirFd (borrowed), and its path inside the root, for refusals.
type moveEnd struct {
	dirFd int
	name  string
	path  string
}

// checkMove refuses a rename of from to to (in another folder) if it
// would carry a symlink to where it leads out: the entry itself, or, for
// a folder, any symlink in its tree, each judged from its new place. With
// exchange (RENAME_EXCHANGE) both entries move. It answers EPERM for a
// link that would lead out and EXDEV for a tree too big to check, each
// refusal logged through j.refuse.
//
// A rename within one folder is not checked: it changes no entry's depth,
// so every link's ".." climbs as before; it can only make a name appear
// or vanish, as making or removing an entry does, which each readlink
// checks anyway. Likewise the check and the rename are two steps: a link
// made in the moved tree between them (checked from its old place) is
// judged again when it is read; host views never follow it.
func (j linkJudge) checkMove(from, to moveEnd, exchange bool) syscall.Errno {
	var sst, dst syscall.Stat_t
	if err := fstat(from.dirFd, &sst); err != nil {
		return fusefs.ToErrno(err)
	}
	if err := fstat(to.dirFd, &dst); err != nil {
		return fusefs.ToErrno(err)
	}
	rid, err := j.identity()
	if err != nil {
		return fusefs.ToErrno(err)
	}
	var moves []*placement
	add := func(from moveEnd, fromIno uint64, to moveEnd, toIno uint64) (syscall.Errno, string) {
		fd, err := openChild(from.dirFd, from.name)
		if err != nil {
			return 0, "" // the rename itself reports a missing entry
		}
		var st syscall.Stat_t
		if err := fstat(fd, &st); err != nil {
			unix.Close(fd)
			return fusefs.ToErrno(err), ""
		}
		p := &placement{
			ino: st.Ino, fromDir: fromIno, toDir: toIno, fromName: from.name, toName: to.name, fd: fd, toDirFd: to.dirFd,
			isDir:     st.Mode&syscall.S_IFMT == syscall.S_IFDIR,
			isSymlink: st.Mode&syscall.S_IFMT == syscall.S_IFLNK,
			fromPath:  from.path, newPath: to.path,
		}
		moves = append(moves, p)
		if !p.isDir && !p.isSymlink {
			return 0, ""
		}
		d, exact, err := j.depthOf(to.dirFd, rid, maxLinkDepth)
		if err == nil && !exact {
			err = fmt.Errorf("more than %d folders deep", maxLinkDepth)
		}
		if err != nil {
			return syscall.EPERM, fmt.Sprintf("cannot place %s: %v", to.path, err)
		}
		p.toDepth = d
		return 0, ""
	}
	defer func() {
		for _, p := range moves {
			unix.Close(p.fd)
		}
	}()
	if errno, why := add(from, sst.Ino, to, dst.Ino); errno != 0 {
		if why != "" {
			j.refuse("rename", from.path, "", why)
		}
		return errno
	}
	if exchange {
		if errno, why := add(to, dst.Ino, from, sst.Ino); errno != 0 {
			if why != "" {
				j.refuse("rename", to.path, "", why)
			}
			return errno
		}
	}
	for _, p := range moves {
		switch {
		case p.isSymlink:
			target, err := readlinkFd(p.fd)
			if err != nil {
				return fusefs.ToErrno(err)
			}
			if why := j.escapesAt(p.toDirFd, p.toDepth, true, rid, target, moves); why != "" {
				j.refuse("rename", p.fromPath, target, why+" from "+p.newPath)
				return syscall.EPERM
			}
		case p.isDir:
			if errno := j.checkMovedTree(p, moves, rid); errno != 0 {
				return errno
			}
		}
	}
	return 0
}

// checkMovedTree checks every symlink in the folder p moves, from where
// the rename puts it. The walk is bounded (maxMovedEntries,
// maxMovedDepth); beyond the bounds the rename is refused with EXDEV.
func (j linkJudge) checkMovedTree(p *placement, moves []*placement, rid rootID) syscall.Errno {
	type frame struct {
		dir   *os.File
		depth int    // depth of dir below the root, after the rename
		path  string // dir's path below p's new place, for refusals
	}
	top, err := reopen(p.fd, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return fusefs.ToErrno(err)
	}
	// Each folder's os.File is named by its /proc/self/fd link: where the
	// backing filesystem gives no entry types, ReadDir lstats parent+"/"+
	// name, which must name this very folder.
	dirFile := func(fd int) *os.File { return os.NewFile(uintptr(fd), procFdPath(fd)) }
	stack := []frame{{dir: dirFile(top), depth: p.toDepth + 1, path: p.newPath}}
	defer func() {
		for _, f := range stack {
			f.dir.Close()
		}
	}()
	// A sub-folder is opened as openChild opens a name, but for reading.
	subdir := unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	}
	entries := 0
	for len(stack) > 0 {
		f := stack[len(stack)-1]
		batch, err := f.dir.ReadDir(256)
		if err == io.EOF || (err == nil && len(batch) == 0) {
			f.dir.Close()
			stack = stack[:len(stack)-1]
			continue
		}
		if err != nil {
			j.refuse("rename", p.fromPath, "", fmt.Sprintf("cannot read %s: %v", f.path, err))
			return syscall.EPERM
		}
		dfd := int(f.dir.Fd())
		for _, e := range batch {
			entries++
			if entries > maxMovedEntries {
				j.refuse("rename", p.fromPath, "", fmt.Sprintf("the folder holds more than %d entries to check; copy it instead", maxMovedEntries))
				return syscall.EXDEV
			}
			switch e.Type() & os.ModeType {
			case os.ModeSymlink:
				target, err := readlinkAt(dfd, e.Name())
				if errors.Is(err, unix.ENOENT) {
					continue // removed meanwhile
				}
				if err != nil {
					j.refuse("rename", p.fromPath, "", fmt.Sprintf("cannot read the link %s/%s: %v", f.path, e.Name(), err))
					return syscall.EPERM
				}
				if why := j.escapesAt(dfd, f.depth, true, rid, target, moves); why != "" {
					j.refuse("rename", p.fromPath, target, why+" from "+f.path+"/"+e.Name())
					return syscall.EPERM
				}
			case os.ModeDir:
				if f.depth-p.toDepth >= maxMovedDepth {
					j.refuse("rename", p.fromPath, "", fmt.Sprintf("the folder is more than %d deep to check; copy it instead", maxMovedDepth))
					return syscall.EXDEV
				}
				cfd, err := openat2Retry(dfd, e.Name(), &subdir)
				if errors.Is(err, unix.ENOENT) {
					continue
				}
				if err != nil {
					j.refuse("rename", p.fromPath, "", fmt.Sprintf("cannot open %s/%s: %v", f.path, e.Name(), err))
					return syscall.EPERM
				}
				stack = append(stack, frame{dir: dirFile(cfd), depth: f.depth + 1, path: f.path + "/" + e.Name()})
			}
		}
	}
	return 0
}

// escapesFrom reports why a symlink with this target, sitting in the
// folder dfd, would lead out of the root; "" if it stays inside.
//
// The folder is placed only as far as the target climbs lexically: a
// link to "../lib" needs to know that its folder is at least one level
// below the root, not how deep it is. The walk then knows the root by its
// inode.
func (j linkJudge) escapesFrom(dfd int, target string, moves []*placement) string {
	rid, err := j.identity()
	if err != nil {
		return fmt.Sprintf("cannot stat the root: %v", err)
	}
	depth, exact, err := j.depthOf(dfd, rid, lexicalClimb(target))
	if err != nil {
		return fmt.Sprintf("cannot place the link's folder: %v", err)
	}
	return j.escapesAt(dfd, depth, exact, rid, target, moves)
}

// rootID is the root's backing inode, which the walks meet it by.
type rootID struct{ dev, ino uint64 }

func (j linkJudge) identity() (rootID, error) {
	var st syscall.Stat_t
	if err := fstat(j.root, &st); err != nil {
		return rootID{}, err
	}
	return rootID{st.Dev, st.Ino}, nil
}

// depthOf returns how many folders below the root the folder dfd is, by
// climbing its real parents ("..", as the kernel does) to the root; exact
// is false if it stopped after limit levels without meeting the root (the
// folder is deeper than limit). It fails if the climb leaves the root's
// filesystem, or passes maxLinkDepth without meeting the root: the folder
// is not below it.
func (j linkJudge) depthOf(dfd int, rid rootID, limit int) (depth int, exact bool, err error) {
	cur := dfd
	defer func() {
		if cur != dfd {
			unix.Close(cur)
		}
	}()
	for depth := 0; depth <= maxLinkDepth; depth++ {
		var st syscall.Stat_t
		if err := fstat(cur, &st); err != nil {
			return 0, false, fmt.Errorf("stat a parent: %w", err)
		}
		if st.Dev != rid.dev {
			return 0, false, errors.New("a parent is on another filesystem")
		}
		if st.Ino == rid.ino {
			return depth, true, nil
		}
		if depth >= limit {
			return depth, false, nil
		}
		up, err := openParent(cur)
		if err != nil {
			return 0, false, err
		}
		if cur != dfd {
			unix.Close(cur)
		}
		cur = up
	}
	return 0, false, fmt.Errorf("more than %d folders deep", maxLinkDepth)
}

// openParent opens the real parent of the folder fd, as the kernel's ".."
// would.
func openParent(fd int) (int, error) {
	for {
		up, err := unix.Openat(fd, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return -1, fmt.Errorf("open a parent: %w", err)
		}
		return up, nil
	}
}

// escapesAt reports why a symlink with this target, sitting in the folder
// dfd depth levels below the root (at least depth, unless exact), would
// lead out of the root; "" if it stays inside. moves, if any, are entries of a rename being checked: the
// walk sees them where the rename puts them.
//
// It walks the target as the kernel would, one name at a time from a
// descriptor (never a joined path, which the kernel's walk does not need
// and which could fail where the kernel's succeeds): ".." climbs the real
// parent, and every symlink met on the way is read and walked too, so a
// chain of links that each look harmless is judged by where it really
// ends. Each name is opened with openat2 below the current folder,
// following no link and crossing no mount.
//
// It fails closed. Only a missing name (ENOENT) ends the walk as "inside":
// the kernel's walk stops there too, and whatever is made there later is
// checked again when this link is read. A walk that reaches a file with
// names still to go stops likewise (the kernel answers ENOTDIR). Every
// other error (a name too long, a permission, another filesystem, more
// than maxLinkHops links, a lost place) counts as leading out. Lexically
// the target must also stay inside, so a name that does not exist yet
// cannot become an exit later.
func (j linkJudge) escapesAt(dfd, depth int, exact bool, rid rootID, target string, moves []*placement) string {
	if target == "" {
		return ""
	}
	if strings.HasPrefix(target, "/") {
		return "an absolute link target leaves the workspace"
	}
	if lexicallyEscapes(depth, target) {
		return "the link target climbs out of the workspace"
	}
	cur, err := unix.FcntlInt(uintptr(dfd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return fmt.Sprintf("cannot hold the link's folder: %v", err)
	}
	defer func() { unix.Close(cur) }()
	var st syscall.Stat_t
	if err := fstat(cur, &st); err != nil {
		return fmt.Sprintf("cannot stat the link's folder: %v", err)
	}
	curIno := st.Ino
	// step replaces the current folder with next, a folder of depth d.
	step := func(next int, d int) string {
		if err := fstat(next, &st); err != nil {
			unix.Close(next)
			return fmt.Sprintf("cannot stat a folder on the way: %v", err)
		}
		if st.Dev != rid.dev || st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
			unix.Close(next)
			return "the walk left the workspace's filesystem"
		}
		unix.Close(cur)
		cur, curIno, depth = next, st.Ino, d
		return ""
	}
	queue := strings.Split(target, "/")
	hops := 0
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if curIno == rid.ino {
				return "the link climbs above the workspace's root"
			}
			if exact && depth <= 0 {
				return "the link's walk lost its place below the root"
			}
			if p := movedEntry(moves, curIno); p != nil {
				next, err := unix.FcntlInt(uintptr(p.toDirFd), unix.F_DUPFD_CLOEXEC, 0)
				if err != nil {
					return fmt.Sprintf("cannot hold a folder on the way: %v", err)
				}
				if why := step(next, p.toDepth); why != "" {
					return why
				}
				exact = true
				continue
			}
			next, err := openParent(cur)
			if err != nil {
				return fmt.Sprintf("cannot climb: %v", err)
			}
			if why := step(next, depth-1); why != "" {
				return why
			}
			continue
		}
		next, gone, err := openPlaced(cur, curIno, c, moves)
		if gone || errors.Is(err, unix.ENOENT) {
			return "" // the kernel's walk stops here too
		}
		if err != nil {
			return fmt.Sprintf("cannot check where the link leads: %v", err)
		}
		if err := fstat(next, &st); err != nil {
			unix.Close(next)
			return fmt.Sprintf("cannot stat a name on the way: %v", err)
		}
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFDIR:
			if why := step(next, depth+1); why != "" {
				return why
			}
		case syscall.S_IFLNK:
			hops++
			if hops > maxLinkHops {
				unix.Close(next)
				return fmt.Sprintf("more than %d links in a chain", maxLinkHops)
			}
			link, err := readlinkFd(next)
			unix.Close(next)
			if err != nil {
				return fmt.Sprintf("cannot read a link on the way: %v", err)
			}
			if strings.HasPrefix(link, "/") {
				return "the link leads out of the workspace through an absolute link"
			}
			// The link's target is walked from the folder that holds it.
			queue = append(strings.Split(link, "/"), queue...)
		default:
			unix.Close(next)
			return "" // a file: the walk ends here, or fails with ENOTDIR
		}
	}
	return ""
}

// movedEntry returns the placement of the entry with inode ino, if a
// rename being checked moves it.
func movedEntry(moves []*placement, ino uint64) *placement {
	for _, p := range moves {
		if p.ino == ino {
			return p
		}
	}
	return nil
}

// openPlaced opens name below the folder dfd (inode ino) as the tree will
// be after the renames being checked: a moved entry at its new place,
// nothing (gone) at the place it leaves.
func openPlaced(dfd int, ino uint64, name string, moves []*placement) (fd int, gone bool, err error) {
	for _, p := range moves {
		if p.toDir == ino && p.toName == name {
			fd, err := unix.FcntlInt(uintptr(p.fd), unix.F_DUPFD_CLOEXEC, 0)
			return fd, false, err
		}
	}
	for _, p := range moves {
		if p.fromDir == ino && p.fromName == name {
			return -1, true, nil
		}
	}
	fd, err = openChild(dfd, name)
	return fd, false, err
}

// lexicalClimb returns how many levels target climbs, read as plain
// names, above the folder it starts from.
func lexicalClimb(target string) int {
	depth, low := 0, 0
	for _, c := range strings.Split(target, "/") {
		switch c {
		case "", ".":
		case "..":
			depth--
			low = min(low, depth)
		default:
			depth++
		}
	}
	return -low
}

// lexicallyEscapes reports whether target, read as plain names from a
// directory depth levels below the root, climbs above the root.
func lexicallyEscapes(depth int, target string) bool {
	for _, c := range strings.Split(target, "/") {
		switch c {
		case "", ".":
		case "..":
			depth--
			if depth < 0 {
				return true
			}
		default:
			depth++
		}
	}
	return false
}
