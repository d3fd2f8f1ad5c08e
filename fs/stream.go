package fs

import (
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"syscall"

	"golang.org/x/sys/unix"
)

// Raw content: a file of any size read out (OpenRead, ReadTo) or written
// in (WriteFrom) as a stream, through the same ledger as Read and Write,
// without MaxFileBytes: nothing is held in memory but a buffer.
//
// Neither holds the path's lock while bytes flow: a slow reader or writer
// at the other end must not hold back the file's other users. A read
// takes the file's version when it opens it, and, once the whole content
// was read, records a read of that version, or of the version it started
// from if the file changed meanwhile (so a write based on it is refused
// until a fresh read). A write takes the content into a temporary file
// first, then takes the lock, checks again and replaces the file as Write
// does: a refused or failed write (a stale read, a quota, a full disk, a
// caller that stopped sending) leaves the old file whole.

// streamBuffer is the size of the buffer a stream goes through.
const streamBuffer = 256 << 10

// SpaceError: a write refused for want of space: the workspace's disk
// quota (EDQUOT) or the disk (ENOSPC). The file is as it was.
type SpaceError struct {
	Path string
	Err  error // matches syscall.EDQUOT or syscall.ENOSPC
}

func (e *SpaceError) Error() string {
	if errors.Is(e.Err, syscall.EDQUOT) {
		return fmt.Sprintf("%s was not written: the disk quota is full.", e.Path)
	}
	return fmt.Sprintf("%s was not written: the disk is full.", e.Path)
}

func (e *SpaceError) Unwrap() error { return e.Err }

// spaceError turns a write's failure for want of space into a
// *SpaceError about rel; other errors are left as they are.
func spaceError(rel string, err error) error {
	var se *SpaceError
	if err == nil || errors.As(err, &se) {
		return err
	}
	if errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.ENOSPC) {
		return &SpaceError{Path: rel, Err: err}
	}
	return err
}

// ContentError: the content of a WriteFrom could not be read (its reader
// failed: a caller that stopped sending, or went away). Nothing was
// written.
type ContentError struct {
	Path string
	Err  error
}

func (e *ContentError) Error() string {
	return fmt.Sprintf("%s was not written: its content could not be read: %v", e.Path, e.Err)
}

func (e *ContentError) Unwrap() error { return e.Err }

// FileReader is a file's content on its way out (OpenRead): Size bytes,
// as they were at Version. Close it.
type FileReader struct {
	Size    int64
	Version uint64

	f     *Files
	a     Actor
	t     *target
	fd    int
	off   int64
	whole bool // every byte was read
}

// OpenRead opens the file at p for a (links followed as Read follows
// them) to read its content as a stream. The read is recorded when the
// reader is closed after its whole content was read.
func (f *Files) OpenRead(ctx context.Context, a Actor, p string) (*FileReader, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t, err := f.resolve(p, false)
	if err != nil {
		return nil, err
	}
	r, err := f.openRead(a, t)
	if err != nil {
		t.close()
		return nil, err
	}
	return r, nil
}

func (f *Files) openRead(a Actor, t *target) (*FileReader, error) {
	g, unlock, err := f.lockTarget(t)
	if err != nil {
		return nil, err
	}
	defer unlock()
	fd, err := unix.Openat(t.dirFd, t.name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		if err == unix.ENOENT {
			return nil, fmt.Errorf("%s: %w", t.rel, iofs.ErrNotExist)
		}
		return nil, fmt.Errorf("%s: %w", t.rel, err)
	}
	var st syscall.Stat_t
	if err := fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: %w", t.rel, err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		unix.Close(fd)
		return nil, &NotFileError{Path: t.rel}
	}
	return &FileReader{Size: st.Size, Version: g.state.version, f: f, a: a, t: t, fd: fd}, nil
}

// Read reads the next bytes of the content: Size bytes in all, then
// io.EOF. A file cut shorter meanwhile ends with io.ErrUnexpectedEOF.
func (r *FileReader) Read(b []byte) (int, error) {
	left := r.Size - r.off
	if left <= 0 {
		r.whole = true
		return 0, io.EOF
	}
	if int64(len(b)) > left {
		b = b[:left]
	}
	for {
		n, err := unix.Pread(r.fd, b, r.off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("%s: %w", r.t.rel, err)
		}
		if n == 0 && len(b) > 0 {
			return 0, fmt.Errorf("%s: cut to %d bytes while read: %w", r.t.rel, r.off, io.ErrUnexpectedEOF)
		}
		r.off += int64(n)
		return n, nil
	}
}

// Close closes the file. If its whole content was read, the read is
// recorded: at Version if the file is unchanged, else at Version all the
// same (older than the file: a write based on it is refused), unless the
// actor's own record is newer already.
func (r *FileReader) Close() error {
	if r.fd < 0 {
		return nil
	}
	unix.Close(r.fd)
	r.fd = -1
	defer r.t.close()
	if !r.whole {
		return nil
	}
	g, unlock, err := r.f.lockTarget(r.t)
	if err != nil {
		return err
	}
	defer unlock()
	l := r.f.hub.ledger
	if g.state.version == r.Version {
		l.read(r.a, g.key, g.state)
	} else {
		l.readOld(r.a, g.key, g.state, r.Version)
	}
	return nil
}

// ReadTo writes the content of the file at p to w and returns its size
// and version, and records that a read it (see OpenRead), whatever its
// size.
func (f *Files) ReadTo(ctx context.Context, a Actor, p string, w io.Writer) (int64, uint64, error) {
	r, err := f.OpenRead(ctx, a, p)
	if err != nil {
		return 0, 0, err
	}
	n, err := io.CopyBuffer(w, &ctxReader{ctx: ctx, r: r}, make([]byte, streamBuffer))
	cerr := r.Close()
	if err != nil {
		return n, 0, err
	}
	return n, r.Version, cerr
}

// WriteFrom replaces the content of the file at p (made, with its missing
// folders, if need be; links followed as Write follows them) with all
// that r gives, and returns its size and new version. The file keeps its
// owner and mode (a new one gets its folder's owner and 0644); mode, if
// set, is its mode. Unlike Write it keeps the bytes as they come (no line
// endings adjusted) and has no size bound.
//
// The content goes to a temporary file in the same folder, without the
// path's lock, and is fsync'ed; then, under the lock, it is checked
// again, renamed over the old file and the folder is fsync'ed, as Write
// stores a file. A file with several hard links is written in place, as
// Write does, from the temporary file. Refused with a *StaleError if a
// read the file before its last change (checked before the content is
// taken, and again before it replaces the file); a quota or a full disk
// is a *SpaceError, a failing r a *ContentError; each leaves the old file
// whole.
func (f *Files) WriteFrom(ctx context.Context, a Actor, p string, r io.Reader, mode *uint32) (int64, uint64, error) {
	n, v, err := f.writeFrom(ctx, a, p, r, mode)
	// Once it answered, every mount shows the change.
	f.hub.flush()
	return n, v, err
}

func (f *Files) writeFrom(ctx context.Context, a Actor, p string, r io.Reader, mode *uint32) (int64, uint64, error) {
	u, err := f.StartUpload(ctx, a, p)
	if err != nil {
		return 0, 0, err
	}
	defer u.Close()
	if _, err := u.ReadFrom(ctx, r); err != nil {
		return 0, 0, err
	}
	v, err := f.finishUpload(u, mode)
	return u.n, v, err
}

// Upload is WriteFrom in steps, for content that may come slowly (a
// client's upload): StartUpload, then ReadFrom, then FinishUpload; Close
// in any case. While the content comes it holds one descriptor, its
// temporary file (two where the filesystem has no O_TMPFILE: its folder's
// too), and nothing else of the Files: the caller may close the Files
// that started it and finish it with another of the same workspace, so a
// stalled upload costs nothing beyond its temporary file.
type Upload struct {
	a     Actor
	p     string // as the caller named it
	rel   string // as reported, inside the workspace
	tmp   *tempFile
	dirFd int // the folder of a named tmp, owned; -1 for an unnamed one
	n     int64
	read  bool // ReadFrom ended well
}

// StartUpload resolves p (its missing folders made), refuses early, before
// any content is taken, a write a's read would make stale or a folder in
// the file's place (as WriteFrom does), and makes the temporary file of
// the new content.
func (f *Files) StartUpload(ctx context.Context, a Actor, p string) (*Upload, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t, err := f.streamTarget(a, p)
	if err != nil {
		return nil, spaceError(p, err)
	}
	f.hub.sweepTemps(t.dirFd, &t.dirSt, f.label)
	tmp, err := f.hub.temps.newTemp(t.dirFd, &t.dirSt)
	if err != nil {
		t.close()
		return nil, spaceError(t.rel, fmt.Errorf("%s: make a temporary file: %w", t.rel, err))
	}
	u := &Upload{a: a, p: p, rel: t.rel, tmp: tmp, dirFd: -1}
	if tmp.named {
		// Its name is in this folder: keep the folder to rename it out.
		u.dirFd = t.dirFd
	} else {
		// An unnamed file needs no folder until its link
		// (FinishUpload resolves p again).
		t.close()
		tmp.dirFd = -1
	}
	return u, nil
}

// ReadFrom writes all that r gives into the upload's temporary file, with
// no lock held, and fsyncs it. A failure of r is a *ContentError.
func (u *Upload) ReadFrom(ctx context.Context, r io.Reader) (int64, error) {
	n, err := copyIn(ctx, u.rel, u.tmp.fd, r)
	u.n += n
	if err != nil {
		return u.n, spaceError(u.rel, err)
	}
	if err := fsyncRetry(u.tmp.fd); err != nil {
		return u.n, spaceError(u.rel, fmt.Errorf("%s: fsync: %w", u.rel, err))
	}
	u.read = true
	return u.n, nil
}

// FinishUpload resolves the upload's path again and, under its lock,
// checks it again and puts the new content in place of the old, as
// WriteFrom does; it returns the file's new version. f is any Files of
// the workspace that started u.
func (f *Files) FinishUpload(u *Upload, mode *uint32) (uint64, error) {
	v, err := f.finishUpload(u, mode)
	// Once it answered, every mount shows the change.
	f.hub.flush()
	return v, err
}

func (f *Files) finishUpload(u *Upload, mode *uint32) (v uint64, err error) {
	if !u.read {
		return 0, fmt.Errorf("%s: the upload's content was not read to its end", u.rel)
	}
	defer f.changes.enter()()
	t, err := f.resolve(u.p, true)
	if err != nil {
		return 0, spaceError(u.p, err)
	}
	defer t.close()
	defer func() { err = spaceError(t.rel, err) }()
	if u.dirFd < 0 {
		f.hub.sweepTemps(t.dirFd, &t.dirSt, f.label)
	}
	g, unlock, err := f.lockTarget(t)
	if err != nil {
		return 0, err
	}
	defer unlock()
	if err := f.refuseIfStale("write", u.a, t, g); err != nil {
		return 0, err
	}
	tmp, n := u.tmp, u.n
	var st syscall.Stat_t
	old := &st
	if err := fstatat(t.dirFd, t.name, old); err != nil {
		if err != unix.ENOENT {
			return 0, fmt.Errorf("%s: %w", t.rel, err)
		}
		old = nil
	} else if old.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return 0, &NotFileError{Path: t.rel}
	} else if old.Nlink > 1 {
		src, err := reopen(tmp.fd, unix.O_RDONLY)
		if err != nil {
			return 0, fmt.Errorf("%s: reopen the new content: %w", t.rel, err)
		}
		defer unix.Close(src)
		return f.storeInPlace(u.a, t, g, n, mode, func(fd int) error { return copyFd(fd, src, n) })
	}
	return f.commit(u.a, t, g, tmp, old, mode)
}

// Close discards the temporary file unless it replaced its target, and
// releases what the upload holds.
func (u *Upload) Close() {
	if u.tmp == nil {
		return
	}
	if u.tmp.dirFd < 0 {
		// Unnamed and never linked: nothing of it is in a folder.
		unix.Close(u.tmp.fd)
		u.tmp.forget()
	} else {
		u.tmp.discard()
	}
	if u.dirFd >= 0 {
		unix.Close(u.dirFd)
	}
	u.tmp = nil
}

// streamTarget resolves p for WriteFrom (its missing folders made, under
// the change gate) and refuses early, before any content is taken, a
// write a's read would make stale or a folder in the file's place.
func (f *Files) streamTarget(a Actor, p string) (*target, error) {
	defer f.changes.enter()()
	t, err := f.resolve(p, true)
	if err != nil {
		return nil, err
	}
	g, unlock, err := f.lockTarget(t)
	if err == nil {
		err = f.refuseIfStale("write", a, t, g)
		if err == nil && g.state.fp.dir {
			err = &NotFileError{Path: t.rel}
		}
		unlock()
	}
	if err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

// copyIn writes all that r gives into the file fd and returns how many
// bytes. A failure of r is a *ContentError; of the file, a plain one.
func copyIn(ctx context.Context, rel string, fd int, r io.Reader) (int64, error) {
	buf := make([]byte, streamBuffer)
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return n, &ContentError{Path: rel, Err: err}
		}
		m, rerr := r.Read(buf)
		if m > 0 {
			if _, err := fdWriter(fd).Write(buf[:m]); err != nil {
				return n, fmt.Errorf("%s: %w", rel, err)
			}
			n += int64(m)
		}
		if rerr == io.EOF {
			return n, nil
		}
		if rerr != nil {
			return n, &ContentError{Path: rel, Err: rerr}
		}
	}
}

// copyFd copies size bytes of the file src to dst, both from offset 0:
// in the kernel where it can, else through a buffer.
func copyFd(dst, src int, size int64) error {
	var off int64
	for off < size {
		soff, doff := off, off
		n, err := unix.CopyFileRange(src, &soff, dst, &doff, int(min(size-off, 1<<30)), 0)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EXDEV || err == unix.EINVAL || err == unix.ENOSYS || err == unix.EOPNOTSUPP {
			break
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("the new content ended at %d bytes of %d: %w", off, size, io.ErrUnexpectedEOF)
		}
		off += int64(n)
	}
	buf := make([]byte, streamBuffer)
	for off < size {
		n, err := unix.Pread(src, buf[:min(int64(len(buf)), size-off)], off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("the new content ended at %d bytes of %d: %w", off, size, io.ErrUnexpectedEOF)
		}
		for w := 0; w < n; {
			m, err := unix.Pwrite(dst, buf[w:n], off+int64(w))
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return err
			}
			w += m
		}
		off += int64(n)
	}
	return nil
}
