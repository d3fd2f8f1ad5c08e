package fs

import (
	"context"
	"strings"
	"syscall"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Links are where a workspace could leak: a symlink names a place, and the
// kernel, not this daemon, walks to it. So every symlink is judged by where
// the kernel would end up: when it is made, when it moves to another
// directory (rename, hard link), and every time it is read, since a link
// that was harmless when made can lead out after other links change.

// maxLinkHops bounds how many symlinks one check follows, as the kernel
// bounds a walk (40). A longer chain fails in the kernel with ELOOP anyway.
const maxLinkHops = 40

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fusefs.Inode, syscall.Errno) {
	if errno := n.mayModify(name); errno != 0 {
		return nil, errno
	}
	if why := n.root.linkEscapes(n.components(), target); why != "" {
		n.root.refuse("symlink", n.child(name), target, why)
		return nil, syscall.EPERM
	}
	return n.makeEntry(ctx, name, out, 0, true, func(dfd int) error {
		return unix.Symlinkat(target, dfd, name)
	})
}

// Readlink returns a link's target only if following it stays inside the
// root. The kernel follows a link by asking for its target here, so
// refusing the read refuses the walk.
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
	comps := n.components()
	if len(comps) > 0 {
		comps = comps[:len(comps)-1]
	}
	if why := n.root.linkEscapes(comps, target); why != "" {
		n.root.refuse("readlink", n.rel(), target, why)
		return nil, syscall.EPERM
	}
	return []byte(target), 0
}

// Link makes a hard link. The kernel only hands us inodes of this same
// mount, so a file from outside the root can never be linked in.
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
	tfd, tdone, errno := t.use()
	if errno != 0 {
		return nil, errno
	}
	defer tdone()
	if t.isSymlink() {
		linkTarget, err := readlinkFd(tfd)
		if err != nil {
			return nil, fusefs.ToErrno(err)
		}
		if why := n.root.linkEscapes(n.components(), linkTarget); why != "" {
			n.root.refuse("link", n.child(name), linkTarget, why)
			return nil, syscall.EPERM
		}
	}
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

// checkMovedLink refuses to move the entry name of n into the directory
// dst if it is a symlink that would lead out of the root from there.
func (n *node) checkMovedLink(name string, dst *node, op string) syscall.Errno {
	dfd, done, errno := n.use()
	if errno != 0 {
		return errno
	}
	defer done()
	fd, err := openChild(dfd, name)
	if err != nil {
		return 0 // the move itself reports a missing entry
	}
	defer unix.Close(fd)
	var st syscall.Stat_t
	if err := fstat(fd, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFLNK {
		return 0
	}
	target, err := readlinkFd(fd)
	if err != nil {
		return fusefs.ToErrno(err)
	}
	if why := n.root.linkEscapes(dst.components(), target); why != "" {
		n.root.refuse(op, n.child(name), target, why+" from "+dst.rel())
		return syscall.EPERM
	}
	return 0
}

// components returns the names from the root down to n.
func (n *node) components() []string {
	p := n.Path(nil)
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

// linkEscapes reports why a symlink with this target, sitting in the
// directory dir (names from the root), would lead out of the root; "" if
// it stays inside.
//
// It walks the target as the kernel would: ".." climbs the real parent,
// and every symlink met on the way is read and walked too, so a chain of
// links that each look harmless is judged by where it really ends. The
// walk is fd-relative from the root and follows no link by itself.
// Lexically the target must also stay inside, so a name that does not
// exist yet cannot become an exit later.
func (r *root) linkEscapes(dir []string, target string) string {
	if target == "" {
		return ""
	}
	if strings.HasPrefix(target, "/") {
		return "an absolute link target leaves the workspace"
	}
	if lexicallyEscapes(len(dir), target) {
		return "the link target climbs out of the workspace"
	}
	stack := append([]string(nil), dir...)
	queue := strings.Split(target, "/")
	hops := 0
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(stack) == 0 {
				return "the link leads out of the workspace through another link"
			}
			stack = stack[:len(stack)-1]
			continue
		}
		fd, err := r.openBeneath(append(stack, c))
		if err != nil {
			// Nothing there (yet), or not a directory: the kernel's
			// walk stops here too. Whatever is made here later is
			// checked when this link is read.
			return ""
		}
		var st syscall.Stat_t
		err = fstat(fd, &st)
		if err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFLNK {
			unix.Close(fd)
			if err != nil {
				return ""
			}
			stack = append(stack, c)
			continue
		}
		hops++
		if hops > maxLinkHops {
			unix.Close(fd)
			return "" // the kernel gives ELOOP
		}
		next, err := readlinkFd(fd)
		unix.Close(fd)
		if err != nil {
			return ""
		}
		if strings.HasPrefix(next, "/") {
			return "the link leads out of the workspace through an absolute link"
		}
		queue = append(strings.Split(next, "/"), queue...)
	}
	return ""
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

// openBeneath opens the entry at the given names below the root as an
// O_PATH descriptor, refusing any symlink or mount crossing on the way.
func (r *root) openBeneath(names []string) (int, error) {
	how := unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	}
	return unix.Openat2(r.fd, strings.Join(names, "/"), &how)
}
