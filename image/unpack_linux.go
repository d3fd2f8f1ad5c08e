package image

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// Unpacking: the layers of an image are applied in order to ONE flattened
// tree, the image's rootfs, not kept apart for overlayfs. A flattened tree
// is one read-only tree, bound once into each jail: no overlay mount per
// jail, no layer folders shared between images to keep alive, and the
// whiteouts are applied here, once, so that the jail's kernel never reads
// one. What it costs (layers shared by two images are stored twice) is
// bounded by StoreBytes.
//
// The tar entries are hostile until proven otherwise. The rules:
//
//   - Nothing is named by a path string that could be raced or lead out:
//     the rootfs is held as a descriptor, every parent folder is opened
//     from it with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//     RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV), and every entry is made
//     on that parent's descriptor (mkdirat, openat(O_CREAT|O_EXCL|
//     O_NOFOLLOW), symlinkat, linkat, mknodat, fchownat and utimensat with
//     AT_SYMLINK_NOFOLLOW). A name that passes through a symlink (even
//     one the image made itself) is refused, not followed.
//   - Refused, failing the whole image: a name with a ".." component or
//     absolute ("./" in front is fine), longer than PATH_MAX, deeper than
//     maxDepth, with a NUL; a hard link whose target is absolute, has
//     "..", is missing, is a folder or passes through a link; a symlink
//     whose target, resolved lexically from the link's own folder, climbs
//     above the rootfs.
//   - Absolute symlink targets, common in real images (/etc/localtime ->
//     /usr/share/zoneinfo/Etc/UTC, /etc/alternatives/*), are rewritten to
//     the relative target that reaches the same place from the link's
//     folder ("../usr/share/zoneinfo/Etc/UTC"). Inside the jail, where
//     the rootfs is "/", both resolve to the same file; on the host no
//     link of the store leads out of its rootfs to a host file. (The
//     check is lexical, as the kernel's "/" clamps ".." in the jail: a
//     host process must still never follow links in the store, or only
//     with RESOLVE_IN_ROOT.)
//   - Neutralised: device nodes are skipped (a jail gets its /dev from
//     the jail, never from an image); set-uid, set-gid, and sticky on
//     non-folders are stripped; no xattr is applied (security.capability
//     would give file capabilities, trusted.* and security.* are the
//     host's). Fifos are made: they are inert files, and some images'
//     programs expect theirs. Owners are kept (lchown): the tree is
//     private to the store (Dir is 0700), and the jail maps them.
//   - Whiteouts: ".wh.NAME" removes NAME as the lower layers left it
//     (recursively, beneath a descriptor, following no link);
//     ".wh..wh..opq" in folder D removes D's children from lower layers
//     and keeps those this same layer wrote, before or after the marker
//     in the tar. A whiteout is never made in the tree.
//   - Bombs: past MaxImageBytes written bytes (counted before a file is
//     written, from its header) or MaxEntries entries of the image, the
//     image is refused, the bound named.
//   - An entry over an existing one of a lower layer replaces it: removed,
//     then made (a file never writes through an old hard link); a folder
//     over a folder merges, and takes the new owner and mode.
//
// The unpacker is used by one goroutine at a time.

// maxDepth bounds the folders of one name: PATH_MAX allows ~2000 with
// one-letter names, which deep recursion in removal and every reader of
// the tree would pay for.
const maxDepth = 256

// resolveBeneath is how every parent folder is opened from the rootfs.
const resolveBeneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// dirBytes is what a folder counts for in an image's bytes.
const dirBytes = 4096

const (
	whPrefix = ".wh."
	whOpaque = ".wh..wh..opq"
	whMeta   = ".wh..wh." // aufs bookkeeping (.wh..wh.plnk...): skipped
)

// What a layer did at a path, for whiteouts in the same layer.
const (
	wrote = 1 // the layer made the entry
	holds = 2 // the layer made an entry below this folder
)

type unpacker struct {
	root       int // the rootfs folder, O_RDONLY|O_DIRECTORY
	maxBytes   int64
	maxEntries int64
	// reserve counts n more written bytes against the store's bound; it
	// fails with ErrStoreFull.
	reserve func(n int64) error
	log     hclog.Logger
	buf     []byte

	written int64 // bytes written, all layers: the bomb's bound
	entries int64 // entries read, all layers
	live    int64 // bytes in the tree now: the image's Bytes

	// Of the layer being applied:
	label    string           // "layer 2 of 5 (sha256:...)"
	mine     map[string]uint8 // wrote or holds, by path
	skipped  map[string]bool  // device nodes skipped, by path
	dirTimes []dirTime        // folders' times, set when the layer is done
}

type dirTime struct {
	rel          string
	atime, mtime time.Time
}

// newUnpacker opens rootfs, an empty folder, to unpack into.
func newUnpacker(rootfs string, maxBytes, maxEntries int64, reserve func(int64) error, log hclog.Logger) (*unpacker, error) {
	fd, err := unix.Open(rootfs, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("image: opening the rootfs being unpacked: %w", err)
	}
	return &unpacker{
		root: fd, maxBytes: maxBytes, maxEntries: maxEntries, reserve: reserve, log: log,
		buf: make([]byte, 256<<10), live: dirBytes,
	}, nil
}

func (u *unpacker) close() { unix.Close(u.root) }

// refuse is the error for an entry of the layer being applied.
func (u *unpacker) refuse(name, format string, args ...any) error {
	return fmt.Errorf("%w: %s: entry %s: %s", ErrRefused, u.label, short(name), fmt.Sprintf(format, args...))
}

// short quotes a name for a message, its middle cut when it is long.
func short(name string) string {
	if len(name) > 160 {
		name = fmt.Sprintf("%s...(%d bytes)...%s", name[:80], len(name)-140, name[len(name)-60:])
	}
	return fmt.Sprintf("%q", name)
}

// apply applies one layer's tar.
func (u *unpacker) apply(ctx context.Context, label string, tr *tar.Reader) error {
	u.label = label
	u.mine = map[string]uint8{}
	u.skipped = map[string]bool{}
	u.dirTimes = u.dirTimes[:0]
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("image: unpacking %s: %w", label, err)
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			if errors.Is(err, ErrStoreFull) || errors.Is(err, ErrRefused) || ctx.Err() != nil {
				return err
			}
			return fmt.Errorf("%w: %s: reading the tar: %v", ErrRefused, label, err)
		}
		if err := u.entry(hdr, tr); err != nil {
			return err
		}
	}
	u.setDirTimes()
	return nil
}

// charge counts n more bytes written, against the image's bound and the
// store's.
func (u *unpacker) charge(name string, n int64) error {
	if n < 0 || u.written+n > u.maxBytes || u.written+n < u.written {
		return u.refuse(name, "the image unpacks to more than %d bytes (the bound of one image, MaxImageBytes): a tar bomb", u.maxBytes)
	}
	u.written += n
	if err := u.reserve(n); err != nil {
		return fmt.Errorf("%w (%s: entry %s)", err, u.label, short(name))
	}
	return nil
}

func (u *unpacker) entry(hdr *tar.Header, r io.Reader) error {
	u.entries++
	if u.entries > u.maxEntries {
		return u.refuse(hdr.Name, "the image has more than %d entries (the bound of one image, MaxEntries): a tar bomb", u.maxEntries)
	}
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	rel, why := cleanName(hdr.Name)
	if why != "" {
		return u.refuse(hdr.Name, "%s", why)
	}
	dir, base := splitRel(rel)
	if strings.HasPrefix(base, whPrefix) {
		return u.whiteout(hdr.Name, dir, base)
	}
	if hdr.Uid < 0 || hdr.Gid < 0 || hdr.Uid >= math.MaxUint32 || hdr.Gid >= math.MaxUint32 {
		return u.refuse(hdr.Name, "owner %d:%d is out of range", hdr.Uid, hdr.Gid)
	}
	if rel == "" {
		if hdr.Typeflag != tar.TypeDir {
			return u.refuse(hdr.Name, "names the rootfs itself, as a non-folder")
		}
		return u.rootDir(hdr)
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		return u.mkdir(hdr, rel, dir, base)
	case tar.TypeReg, tar.TypeGNUSparse:
		return u.file(hdr, r, rel, dir, base)
	case tar.TypeSymlink:
		return u.symlink(hdr, rel, dir, base)
	case tar.TypeLink:
		return u.hardlink(hdr, rel, dir, base)
	case tar.TypeFifo:
		return u.fifo(hdr, rel, dir, base)
	case tar.TypeChar, tar.TypeBlock:
		// Skipped; whatever a lower layer had there goes, as the layer
		// replaced it.
		pfd, err := u.openDir(hdr.Name, dir, true)
		if err != nil {
			return err
		}
		defer unix.Close(pfd)
		if err := u.removeAt(pfd, base); err != nil {
			return u.failed(hdr.Name, "removing what a lower layer had there", err)
		}
		u.skipped[rel] = true
		u.log.Debug("device node skipped", "layer", u.label, "name", hdr.Name)
		return nil
	default:
		u.log.Debug("tar entry of an unknown type skipped", "layer", u.label, "name", hdr.Name, "type", string(hdr.Typeflag))
		return nil
	}
}

// failed is the error for a system call that failed on an entry: not a
// refusal of the image, unless the kernel's answer says the entry led
// somewhere it must not.
func (u *unpacker) failed(name, doing string, err error) error {
	if errors.Is(err, ErrRefused) || errors.Is(err, ErrStoreFull) {
		return err
	}
	switch {
	case errors.Is(err, unix.ELOOP):
		return u.refuse(name, "%s: passes through a symbolic link (names are never followed through links)", doing)
	case errors.Is(err, unix.EXDEV):
		return u.refuse(name, "%s: leads out of the rootfs", doing)
	case errors.Is(err, unix.ENOTDIR):
		return u.refuse(name, "%s: a part of its path is not a folder", doing)
	case errors.Is(err, unix.ENAMETOOLONG):
		return u.refuse(name, "%s: name too long", doing)
	}
	return fmt.Errorf("image: %s: entry %s: %s: %w", u.label, short(name), doing, err)
}

// cleanName is a tar name relative to the rootfs ("" for the rootfs
// itself), or why it is refused.
func cleanName(name string) (string, string) {
	if name == "" {
		return "", "an empty name"
	}
	if len(name) >= unix.PathMax {
		return "", fmt.Sprintf("a name of %d bytes, not less than PATH_MAX (%d)", len(name), unix.PathMax)
	}
	if strings.IndexByte(name, 0) >= 0 {
		return "", "a name with a NUL byte"
	}
	if name[0] == '/' {
		return "", "an absolute name (names are relative to the rootfs)"
	}
	parts := strings.Split(name, "/")
	out := parts[:0]
	for _, p := range parts {
		switch p {
		case "", ".":
			continue
		case "..":
			return "", "a name with a \"..\" component (it would climb out of its folder)"
		}
		if len(p) > unix.NAME_MAX {
			return "", fmt.Sprintf("a component of %d bytes, more than NAME_MAX (%d)", len(p), unix.NAME_MAX)
		}
		out = append(out, p)
	}
	if len(out) > maxDepth {
		return "", fmt.Sprintf("a name %d folders deep, more than %d", len(out), maxDepth)
	}
	return strings.Join(out, "/"), ""
}

// splitRel splits a cleaned name into its folder ("" for the rootfs) and
// its last component.
func splitRel(rel string) (string, string) {
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return "", rel
	}
	return rel[:i], rel[i+1:]
}

func joinRel(dir, base string) string {
	if dir == "" {
		return base
	}
	return dir + "/" + base
}

// linkTarget checks a symlink's target for the link at rel and returns
// the target to make, or why it is refused (see the top of this file).
func linkTarget(rel, target string) (string, string) {
	if target == "" {
		return "", "a symbolic link with an empty target"
	}
	if len(target) >= unix.PathMax {
		return "", fmt.Sprintf("a symbolic link target of %d bytes, not less than PATH_MAX", len(target))
	}
	if strings.IndexByte(target, 0) >= 0 {
		return "", "a symbolic link target with a NUL byte"
	}
	depth := strings.Count(rel, "/") // folders between the rootfs and the link
	if target[0] == '/' {
		// Lexically cleaned as the jail's kernel clamps ".." at "/".
		inner := strings.TrimPrefix(path.Clean(target), "/")
		out := strings.Repeat("../", depth) + inner
		switch {
		case out == "":
			out = "."
		case inner == "":
			out = strings.TrimSuffix(out, "/")
		case strings.HasSuffix(target, "/"):
			out += "/"
		}
		return out, ""
	}
	d := depth
	for _, p := range strings.Split(target, "/") {
		switch p {
		case "", ".":
		case "..":
			d--
			if d < 0 {
				return "", fmt.Sprintf("a symbolic link to %q, which climbs above the rootfs", target)
			}
		default:
			d++
		}
	}
	return target, ""
}

// openDir opens the folder rel of the rootfs, beneath it and through no
// link; with create, the folders missing on the way are made (root's,
// 0755, as the layer's own). The caller closes the descriptor.
func (u *unpacker) openDir(name, rel string, create bool) (int, error) {
	if rel == "" {
		fd, err := unix.Openat(u.root, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, u.failed(name, "opening the rootfs", err)
		}
		return fd, nil
	}
	fd, err := openBeneath(u.root, rel)
	if err == nil {
		return fd, nil
	}
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		return -1, u.refuse(name, "its folder %s %s", rel, whyNotDir(u.root, rel))
	}
	if !errors.Is(err, unix.ENOENT) || !create {
		return -1, u.failed(name, "opening its folder "+rel, err)
	}
	// One name at a time, making what is missing.
	cur, err := unix.Openat(u.root, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, u.failed(name, "opening the rootfs", err)
	}
	done := ""
	for _, c := range strings.Split(rel, "/") {
		done = joinRel(done, c)
		fd, err := openBeneath(cur, c)
		if errors.Is(err, unix.ENOENT) {
			if err = u.charge(name, dirBytes); err == nil {
				err = u.makeDir(cur, c, 0o755, 0, 0)
			}
			if err == nil {
				u.mark(done)
				fd, err = openBeneath(cur, c)
			}
		}
		unix.Close(cur)
		if err != nil {
			return -1, u.failed(name, "making its folder "+done, err)
		}
		cur = fd
	}
	return cur, nil
}

// whyNotDir says why rel, below root, is no folder openBeneath opens:
// which of its names is a link, or no folder.
func whyNotDir(root int, rel string) string {
	cur, err := unix.Openat(root, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err.Error()
	}
	done := ""
	for _, c := range strings.Split(rel, "/") {
		done = joinRel(done, c)
		var st unix.Stat_t
		if err := unix.Fstatat(cur, c, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			unix.Close(cur)
			return fmt.Sprintf("cannot be opened (%s: %v)", done, err)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			unix.Close(cur)
			return fmt.Sprintf("passes through a symbolic link (%s; names are never followed through links)", done)
		case unix.S_IFDIR:
		default:
			unix.Close(cur)
			return fmt.Sprintf("is not a folder (%s is not)", done)
		}
		fd, err := openBeneath(cur, c)
		unix.Close(cur)
		if err != nil {
			return fmt.Sprintf("cannot be opened (%s: %v)", done, err)
		}
		cur = fd
	}
	unix.Close(cur)
	return "changed while it was opened"
}

// openBeneath opens the folder rel below dirfd, beneath it and through no
// link.
func openBeneath(dirfd int, rel string) (int, error) {
	for {
		fd, err := unix.Openat2(dirfd, rel, &unix.OpenHow{
			Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
			Resolve: resolveBeneath,
		})
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		return fd, err
	}
}

// makeDir makes the folder name in pfd with mode and owner (the umask
// left out). The caller has charged it.
func (u *unpacker) makeDir(pfd int, name string, mode uint32, uid, gid int) error {
	if err := unix.Mkdirat(pfd, name, 0o700); err != nil {
		return err
	}
	u.live += dirBytes
	fd, err := unix.Openat(pfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Fchown(fd, uid, gid); err != nil {
		return err
	}
	return unix.Fchmod(fd, mode)
}

// mark records that the layer made rel.
func (u *unpacker) mark(rel string) {
	u.mine[rel] = wrote
	for p, _ := splitRel(rel); p != ""; p, _ = splitRel(p) {
		if u.mine[p] != 0 {
			return
		}
		u.mine[p] = holds
	}
}

// fileMode and dirMode are the modes kept: no set-id bits, and sticky on
// folders only (/tmp's 1777).
func fileMode(m int64) uint32 { return uint32(m) & 0o777 }
func dirMode(m int64) uint32  { return uint32(m) & (0o777 | unix.S_ISVTX) }

func (u *unpacker) rootDir(hdr *tar.Header) error {
	if err := unix.Fchown(u.root, hdr.Uid, hdr.Gid); err != nil {
		return u.failed(hdr.Name, "owner of the rootfs", err)
	}
	if err := unix.Fchmod(u.root, dirMode(hdr.Mode)); err != nil {
		return u.failed(hdr.Name, "mode of the rootfs", err)
	}
	u.dirTimes = append(u.dirTimes, dirTime{"", hdr.AccessTime, hdr.ModTime})
	return nil
}

func (u *unpacker) mkdir(hdr *tar.Header, rel, dir, base string) error {
	pfd, err := u.openDir(hdr.Name, dir, true)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	err = unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW)
	if err == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := u.removeAt(pfd, base); err != nil {
			return u.failed(hdr.Name, "removing the non-folder a lower layer had there", err)
		}
		err = unix.ENOENT
	}
	switch {
	case errors.Is(err, unix.ENOENT):
		if err := u.charge(hdr.Name, dirBytes); err != nil {
			return err
		}
		if err := u.makeDir(pfd, base, dirMode(hdr.Mode), hdr.Uid, hdr.Gid); err != nil {
			return u.failed(hdr.Name, "making the folder", err)
		}
	case err != nil:
		return u.failed(hdr.Name, "looking at what is there", err)
	default:
		// A folder over a folder: merged, with the new owner and mode.
		fd, err := unix.Openat(pfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return u.failed(hdr.Name, "opening the folder", err)
		}
		err = unix.Fchown(fd, hdr.Uid, hdr.Gid)
		if err == nil {
			err = unix.Fchmod(fd, dirMode(hdr.Mode))
		}
		unix.Close(fd)
		if err != nil {
			return u.failed(hdr.Name, "owner and mode of the folder", err)
		}
	}
	u.mark(rel)
	u.dirTimes = append(u.dirTimes, dirTime{rel, hdr.AccessTime, hdr.ModTime})
	return nil
}

func (u *unpacker) file(hdr *tar.Header, r io.Reader, rel, dir, base string) error {
	if hdr.Size < 0 {
		return u.refuse(hdr.Name, "a negative size")
	}
	// Charged from the header, before a byte is written: a bomb is
	// refused without filling the disk first.
	if err := u.charge(hdr.Name, hdr.Size); err != nil {
		return err
	}
	pfd, err := u.openDir(hdr.Name, dir, true)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := u.removeAt(pfd, base); err != nil {
		return u.failed(hdr.Name, "removing what a lower layer had there", err)
	}
	fd, err := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return u.failed(hdr.Name, "making the file", err)
	}
	f := os.NewFile(uintptr(fd), rel)
	n, err := io.CopyBuffer(onlyWriter{f}, io.LimitReader(r, hdr.Size), u.buf)
	u.live += n
	if err == nil && n != hdr.Size {
		err = u.refuse(hdr.Name, "the tar ends after %d of its %d bytes", n, hdr.Size)
	}
	if err == nil {
		err = f.Chown(hdr.Uid, hdr.Gid)
	}
	if err == nil {
		// After the chown, which would clear set-id bits anyway.
		err = f.Chmod(os.FileMode(fileMode(hdr.Mode)))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if errors.Is(err, ErrRefused) {
			return err
		}
		return u.failed(hdr.Name, "writing the file", err)
	}
	u.setTimes(pfd, base, hdr.AccessTime, hdr.ModTime)
	u.mark(rel)
	return nil
}

// onlyWriter hides os.File's ReadFrom: io.CopyBuffer then uses the
// buffer, and reads of the tar stay plain reads.
type onlyWriter struct{ w io.Writer }

func (o onlyWriter) Write(p []byte) (int, error) { return o.w.Write(p) }

func (u *unpacker) symlink(hdr *tar.Header, rel, dir, base string) error {
	target, why := linkTarget(rel, hdr.Linkname)
	if why != "" {
		return u.refuse(hdr.Name, "%s", why)
	}
	if target != hdr.Linkname {
		u.log.Trace("absolute symbolic link made relative", "layer", u.label, "name", rel, "target", hdr.Linkname, "now", target)
	}
	if err := u.charge(hdr.Name, int64(len(target))); err != nil {
		return err
	}
	pfd, err := u.openDir(hdr.Name, dir, true)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := u.removeAt(pfd, base); err != nil {
		return u.failed(hdr.Name, "removing what a lower layer had there", err)
	}
	if err := unix.Symlinkat(target, pfd, base); err != nil {
		return u.failed(hdr.Name, "making the symbolic link", err)
	}
	u.live += int64(len(target))
	if err := unix.Fchownat(pfd, base, hdr.Uid, hdr.Gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return u.failed(hdr.Name, "owner of the symbolic link", err)
	}
	u.setTimes(pfd, base, hdr.AccessTime, hdr.ModTime)
	u.mark(rel)
	return nil
}

func (u *unpacker) hardlink(hdr *tar.Header, rel, dir, base string) error {
	trel, why := cleanName(hdr.Linkname)
	if why != "" {
		return u.refuse(hdr.Name, "a hard link to %q: %s", hdr.Linkname, why)
	}
	if trel == "" {
		return u.refuse(hdr.Name, "a hard link to the rootfs itself")
	}
	if trel == rel {
		return u.refuse(hdr.Name, "a hard link to itself")
	}
	if u.skipped[trel] {
		// A link to a device node skipped is skipped too.
		u.skipped[rel] = true
		return nil
	}
	tdir, tbase := splitRel(trel)
	tfd, err := openBeneathOrRoot(u.root, tdir)
	switch {
	case errors.Is(err, unix.ENOENT):
		return u.refuse(hdr.Name, "a hard link to %q, which does not exist", hdr.Linkname)
	case errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR):
		return u.refuse(hdr.Name, "a hard link to %q, whose folder %s %s", hdr.Linkname, tdir, whyNotDir(u.root, tdir))
	case errors.Is(err, unix.EXDEV):
		return u.refuse(hdr.Name, "a hard link to %q, which leads out of the rootfs", hdr.Linkname)
	case err != nil:
		return u.failed(hdr.Name, "opening the hard link's folder", err)
	}
	defer unix.Close(tfd)
	var st unix.Stat_t
	if err := unix.Fstatat(tfd, tbase, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return u.refuse(hdr.Name, "a hard link to %q, which does not exist", hdr.Linkname)
		}
		return u.failed(hdr.Name, "looking at the hard link's target", err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return u.refuse(hdr.Name, "a hard link to %q, a folder", hdr.Linkname)
	}
	pfd, err := u.openDir(hdr.Name, dir, true)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := u.removeAt(pfd, base); err != nil {
		return u.failed(hdr.Name, "removing what a lower layer had there", err)
	}
	// Flags 0: a symlink target is linked itself, not followed.
	if err := unix.Linkat(tfd, tbase, pfd, base, 0); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return u.refuse(hdr.Name, "a hard link to %q, which its own entry removed", hdr.Linkname)
		}
		return u.failed(hdr.Name, "making the hard link", err)
	}
	u.mark(rel)
	return nil
}

func (u *unpacker) fifo(hdr *tar.Header, rel, dir, base string) error {
	pfd, err := u.openDir(hdr.Name, dir, true)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := u.removeAt(pfd, base); err != nil {
		return u.failed(hdr.Name, "removing what a lower layer had there", err)
	}
	if err := unix.Mknodat(pfd, base, unix.S_IFIFO|0o600, 0); err != nil {
		return u.failed(hdr.Name, "making the fifo", err)
	}
	if err := unix.Fchownat(pfd, base, hdr.Uid, hdr.Gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return u.failed(hdr.Name, "owner of the fifo", err)
	}
	// fchmodat follows a link, but base is the fifo just made, in a tree
	// no one else writes.
	if err := unix.Fchmodat(pfd, base, fileMode(hdr.Mode), 0); err != nil {
		return u.failed(hdr.Name, "mode of the fifo", err)
	}
	u.setTimes(pfd, base, hdr.AccessTime, hdr.ModTime)
	u.mark(rel)
	return nil
}

func (u *unpacker) whiteout(name, dir, base string) error {
	if base == whOpaque {
		// Made if missing: the layer says the folder is there, with
		// nothing of the lower layers in it.
		pfd, err := u.openDir(name, dir, true)
		if err != nil {
			return err
		}
		defer unix.Close(pfd)
		names, err := readNames(pfd)
		if err != nil {
			return u.failed(name, "reading the opaque folder", err)
		}
		for _, n := range names {
			if err := u.removeLower(pfd, n, joinRel(dir, n)); err != nil {
				return u.failed(name, "emptying the opaque folder", err)
			}
		}
		if dir != "" {
			u.mark(dir)
		}
		return nil
	}
	if strings.HasPrefix(base, whMeta) {
		return nil
	}
	target := strings.TrimPrefix(base, whPrefix)
	if target == "" || target == "." || target == ".." {
		return u.refuse(name, "a whiteout of %q", target)
	}
	pfd, err := u.openDir(name, dir, false)
	if errors.Is(err, unix.ENOENT) {
		return nil // nothing there to hide
	}
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := u.removeLower(pfd, target, joinRel(dir, target)); err != nil {
		return u.failed(name, "applying the whiteout", err)
	}
	return nil
}

// removeLower removes what lower layers left at rel (name in pfd): all of
// it, but what the layer being applied made (a whiteout applies to lower
// layers only).
func (u *unpacker) removeLower(pfd int, name, rel string) error {
	if u.mine[rel] == 0 {
		return u.removeAt(pfd, name)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil
	}
	fd, err := unix.Openat(pfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	names, err := readNames(fd)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := u.removeLower(fd, n, rel+"/"+n); err != nil {
			return err
		}
	}
	return nil
}

// removeAt removes name in pfd, a folder with all below it, following no
// link; nothing there is no error. The bytes freed leave u.live.
func (u *unpacker) removeAt(pfd int, name string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := unix.Unlinkat(pfd, name, 0); err != nil {
			return err
		}
		u.live -= liveBytes(&st)
		return nil
	}
	fd, err := unix.Openat(pfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	names, err := readNames(fd)
	for _, n := range names {
		if err != nil {
			break
		}
		err = u.removeAt(fd, n)
	}
	unix.Close(fd)
	if err != nil {
		return err
	}
	if err := unix.Unlinkat(pfd, name, unix.AT_REMOVEDIR); err != nil {
		return err
	}
	u.live -= dirBytes
	return nil
}

// liveBytes is what removing the non-folder st frees: a file's size when
// this is its last name, a link's target.
func liveBytes(st *unix.Stat_t) int64 {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		if st.Nlink <= 1 {
			return st.Size
		}
	case unix.S_IFLNK:
		return st.Size
	}
	return 0
}

// readNames reads the names of the folder fd, "." and ".." left out.
func readNames(fd int) ([]string, error) {
	buf := make([]byte, 32<<10)
	var names []string
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
}

// setTimes sets name's times (not following a link); a failure only
// loses the times.
func (u *unpacker) setTimes(pfd int, name string, atime, mtime time.Time) {
	if mtime.IsZero() {
		return
	}
	if atime.IsZero() {
		atime = mtime
	}
	ts := []unix.Timespec{
		{Sec: atime.Unix(), Nsec: int64(atime.Nanosecond())},
		{Sec: mtime.Unix(), Nsec: int64(mtime.Nanosecond())},
	}
	if err := unix.UtimesNanoAt(pfd, name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		u.log.Trace("setting times", "layer", u.label, "name", name, "error", err)
	}
}

// setDirTimes sets the folders' times once the layer is done: the
// entries made in a folder change its times.
func (u *unpacker) setDirTimes() {
	for _, d := range u.dirTimes {
		dir, base := splitRel(d.rel)
		if d.rel == "" {
			dir, base = "", "."
		}
		pfd, err := openBeneathOrRoot(u.root, dir)
		if err != nil {
			continue // removed, or replaced, later in the layer
		}
		u.setTimes(pfd, base, d.atime, d.mtime)
		unix.Close(pfd)
	}
}

func openBeneathOrRoot(root int, rel string) (int, error) {
	if rel == "" {
		return unix.Openat(root, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	}
	return openBeneath(root, rel)
}

// mountPointPath is a mount point's path relative to the rootfs.
func mountPointPath(p string) (string, error) {
	if !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("image: mount point %q is not an absolute path", p)
	}
	rel, why := cleanName(strings.TrimLeft(p, "/"))
	if why != "" || rel == "" {
		if why == "" {
			why = "the rootfs itself"
		}
		return "", fmt.Errorf("image: mount point %q: %s", p, why)
	}
	return rel, nil
}

// mountPoints makes the mount points in the finished tree: a folder, or
// an empty file 0644, where none is; what is in the way (a link, a file
// where a folder is needed, a folder where a file is) is replaced: the
// jail mounts there, and a mount would follow a link.
func (u *unpacker) mountPoints(mp MountPoints) error {
	u.label = "mount points"
	for _, d := range mp.Dirs {
		rel, err := mountPointPath(d)
		if err != nil {
			return err
		}
		fd, err := u.ensureDir(rel)
		if err != nil {
			return fmt.Errorf("image: making mount point %s: %w", d, err)
		}
		unix.Close(fd)
	}
	for _, f := range mp.Files {
		rel, err := mountPointPath(f)
		if err != nil {
			return err
		}
		if err := u.ensureFile(rel); err != nil {
			return fmt.Errorf("image: making mount point %s: %w", f, err)
		}
	}
	return nil
}

// ensureDir opens the folder rel, making it and its parents, and
// replacing any non-folder in the way.
func (u *unpacker) ensureDir(rel string) (int, error) {
	cur, err := unix.Openat(u.root, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if rel == "" {
		return cur, nil
	}
	for _, c := range strings.Split(rel, "/") {
		var st unix.Stat_t
		err := unix.Fstatat(cur, c, &st, unix.AT_SYMLINK_NOFOLLOW)
		if err == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			err = u.removeAt(cur, c)
			if err == nil {
				err = unix.ENOENT
			}
		}
		if errors.Is(err, unix.ENOENT) {
			err = u.makeDir(cur, c, 0o755, 0, 0)
		}
		var fd int
		if err == nil {
			fd, err = openBeneath(cur, c)
		}
		unix.Close(cur)
		if err != nil {
			return -1, err
		}
		cur = fd
	}
	return cur, nil
}

func (u *unpacker) ensureFile(rel string) error {
	dir, base := splitRel(rel)
	pfd, err := u.ensureDir(dir)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	err = unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW)
	if err == nil {
		if st.Mode&unix.S_IFMT == unix.S_IFREG {
			return nil
		}
		if err := u.removeAt(pfd, base); err != nil {
			return err
		}
	} else if !errors.Is(err, unix.ENOENT) {
		return err
	}
	fd, err := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Fchown(fd, 0, 0); err != nil {
		return err
	}
	return unix.Fchmod(fd, 0o644)
}
