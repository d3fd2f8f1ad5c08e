package snapshot

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"golang.org/x/sys/unix"
)

// Sparse files. A file with holes (ranges the filesystem holds no blocks
// for, which read as zeros) is stored as an extent map: its size and the
// list of its data extents, each an offset, a length and the hash of a
// blob of that extent's bytes. A build finds the extents with
// lseek(SEEK_DATA/SEEK_HOLE) and reads only them, so a hole is never read
// nor hashed; a restore through a Target that takes SparseContent
// truncates the new file to its size and writes only the extents, so the
// holes come back as holes. The map is an object like any other (named by
// the hash of its encoding, deduplicated); the tree entry says it is one
// (Entry.Sparse), so a file whose content happens to be a map's encoding
// is never read as a map. A file without holes is one blob, as before
// maps existed: the hash of a dense file's content does not depend on
// this code, and an extent covering a whole file is that file's blob.
//
// The encoding of an extent map:
//
//	"wx" mapVersion                        header
//	uvarint size                           the file's apparent size
//	uvarint extents                        how many extents follow
//	per extent, in offset order:
//	  uvarint gap, uvarint length, 32-byte hash
//
// gap is the extent's offset less the end of the extent before it (its
// offset for the first): at least 1 after the first, since extents are
// kept maximal; length is at least 1 and the last extent ends at most at
// size. A map that covers its whole file (no hole) is refused: that file
// is a blob. Every uvarint is minimal, so one map has one encoding.
const (
	mapMagic   = "wx"
	mapVersion = 1

	// maxExtents bounds the extents of one map (and so its encoding, at
	// most about 700 KiB, and the blobs of one file). A file with more
	// holes is stored with its smallest holes read as data (mergeExtents):
	// the content is the same, the restored file a little denser.
	maxExtents = 1 << 14
)

// errBadMap marks an extent map encoding that does not decode.
var errBadMap = errors.New("corrupt extent map")

// extent is one run of a file's data.
type extent struct {
	off, len int64
	hash     Hash // the blob of the extent's bytes
}

func (e extent) end() int64 { return e.off + e.len }

// fileMap is a sparse file: its size and its data extents.
type fileMap struct {
	size    int64
	extents []extent
}

// dense reports whether m has no hole: such a file is stored as a blob.
func (m fileMap) dense() bool {
	return m.size == 0 || len(m.extents) == 1 && m.extents[0].off == 0 && m.extents[0].len == m.size
}

func encodeMap(m fileMap) []byte {
	dst := make([]byte, 0, len(mapMagic)+1+20+len(m.extents)*(32+6))
	dst = append(dst, mapMagic...)
	dst = append(dst, mapVersion)
	dst = binary.AppendUvarint(dst, uint64(m.size))
	dst = binary.AppendUvarint(dst, uint64(len(m.extents)))
	var prev int64
	for _, e := range m.extents {
		dst = binary.AppendUvarint(dst, uint64(e.off-prev))
		dst = binary.AppendUvarint(dst, uint64(e.len))
		dst = append(dst, e.hash[:]...)
		prev = e.end()
	}
	return dst
}

// decodeMap decodes and validates an extent map encoding. It never panics
// on any input; a fault is an error wrapping errBadMap.
func decodeMap(b []byte) (fileMap, error) {
	d := treeDecoder{b: b, bad: errBadMap}
	if string(d.bytes("header", len(mapMagic))) != mapMagic {
		d.fail("bad header")
	}
	if v := d.bytes("version", 1); d.err == nil && v[0] != mapVersion {
		d.fail("unknown version %d", v[0])
	}
	var m fileMap
	m.size = int64(d.uvarint("size", math.MaxInt64))
	n := d.uvarint("extents", maxExtents)
	if d.err != nil {
		return fileMap{}, d.err
	}
	// Each extent takes at least 1+1+32 bytes: bound the allocation by
	// what the input can hold.
	m.extents = make([]extent, 0, min(int(n), len(d.b)/34))
	var prev int64
	for i := range n {
		gap := d.uvarint("gap", math.MaxInt64)
		length := d.uvarint("length", math.MaxInt64)
		var e extent
		copy(e.hash[:], d.bytes("hash", len(e.hash)))
		if d.err != nil {
			break
		}
		if i > 0 && gap == 0 {
			d.fail("extent %d: no hole before it", i)
			break
		}
		if length == 0 || gap > uint64(m.size-prev) || length > uint64(m.size-prev)-gap {
			d.fail("extent %d: %d bytes %d after %d, past the size %d", i, length, gap, prev, m.size)
			break
		}
		e.off, e.len = prev+int64(gap), int64(length)
		m.extents = append(m.extents, e)
		prev = e.end()
	}
	if d.err == nil && len(d.b) > 0 {
		d.fail("%d bytes after the last extent", len(d.b))
	}
	if d.err == nil && m.dense() {
		d.fail("no hole: a file without one is a blob")
	}
	if d.err != nil {
		return fileMap{}, d.err
	}
	return m, nil
}

// span is a range of a file, [off, end).
type span struct{ off, end int64 }

// dataSpans returns the data of the open file fd of size bytes as the
// filesystem reports it (SEEK_DATA, SEEK_HOLE), with ok false where it
// cannot say (no SEEK_DATA) or the file has no hole: read it whole. Past
// maxExtents spans, the smallest holes are read as data (mergeExtents).
// The file may change meanwhile: the spans are what was seen, clipped to
// size.
func dataSpans(fd int, size int64) (spans []span, ok bool, err error) {
	minHole := int64(0)
	for off := int64(0); off < size; {
		d, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if err == unix.ENXIO {
			break // no data past off
		}
		if err != nil {
			if off == 0 && isErrno(err, unix.EINVAL, unix.EOPNOTSUPP, unix.ENOTSUP) {
				return nil, false, nil
			}
			return nil, false, fmt.Errorf("find data after %d: %w", off, err)
		}
		if d >= size {
			break
		}
		h, err := unix.Seek(fd, d, unix.SEEK_HOLE)
		if err == unix.ENXIO {
			break // cut meanwhile
		}
		if err != nil {
			return nil, false, fmt.Errorf("find a hole after %d: %w", d, err)
		}
		h = min(max(h, d+1), size)
		if n := len(spans); n > 0 && d-spans[n-1].end <= minHole {
			spans[n-1].end = h
		} else {
			spans = append(spans, span{d, h})
		}
		if len(spans) > maxExtents {
			minHole = max(2*minHole, 64<<10)
			spans = mergeSpans(spans, minHole)
		}
		off = h
	}
	if len(spans) == 1 && spans[0] == (span{0, size}) || size == 0 {
		return nil, false, nil
	}
	return spans, true, nil
}

// mergeSpans joins, in place, the spans that holes of at most minHole
// bytes part.
func mergeSpans(spans []span, minHole int64) []span {
	out := spans[:1]
	for _, s := range spans[1:] {
		if last := &out[len(out)-1]; s.off-last.end <= minHole {
			last.end = s.end
		} else {
			out = append(out, s)
		}
	}
	return out
}

// fdSection reads the file fd from off with pread, n bytes at most (to
// its end where n < 0); the caller closes fd.
type fdSection struct {
	fd  int
	off int64
	n   int64
}

func (f *fdSection) Read(p []byte) (int, error) {
	if f.n == 0 {
		return 0, io.EOF
	}
	if f.n > 0 && int64(len(p)) > f.n {
		p = p[:f.n]
	}
	for {
		n, err := unix.Pread(f.fd, p, f.off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		if n == 0 && len(p) > 0 {
			return 0, io.EOF
		}
		f.off += int64(n)
		if f.n > 0 {
			f.n -= int64(n)
		}
		return n, nil
	}
}

// putFile stores the open regular file fd (size bytes by its fstat, with
// st_blocks blocks) and returns the entry's hash, whether it is an extent
// map, its size and the bytes read. A file with holes is stored as a map
// of blobs of its data; any other as one blob of everything read to its
// end. A file that shrinks meanwhile is stored as what was read.
func (r *Repo) putFile(ws *writeSet, fd int, size, blocks int64, wrap func(io.Reader) io.Reader) (h Hash, sparse bool, n, read int64, err error) {
	var spans []span
	ok := false
	// A file with as many blocks as bytes has no hole worth a lookup
	// (most files): only the others are asked where their data is.
	if blocks*512 < size {
		if spans, ok, err = dataSpans(fd, size); err != nil {
			return Hash{}, false, 0, 0, err
		}
	}
	if !ok {
		h, n, err := r.putStream(ws, wrap(&fdSection{fd: fd, n: -1}))
		return h, false, n, n, err
	}
	m := fileMap{size: size, extents: make([]extent, 0, len(spans))}
	for _, s := range spans {
		eh, got, err := r.putStream(ws, wrap(&fdSection{fd: fd, off: s.off, n: s.end - s.off}))
		read += got
		if err != nil {
			return Hash{}, false, 0, read, fmt.Errorf("read %d bytes at %d: %w", s.end-s.off, s.off, err)
		}
		if got > 0 {
			m.extents = append(m.extents, extent{off: s.off, len: got, hash: eh})
		}
		if got < s.end-s.off { // cut meanwhile: the file ends here
			m.size = s.off + got
			break
		}
	}
	if m.dense() {
		if m.size == 0 {
			h, err := r.putBytes(ws, nil)
			return h, false, 0, read, err
		}
		return m.extents[0].hash, false, m.size, read, nil
	}
	h, err = r.putBytes(ws, encodeMap(m))
	if err != nil {
		return Hash{}, false, 0, read, fmt.Errorf("store its extent map: %w", err)
	}
	return h, true, m.size, read, nil
}

// readMap reads the extent map h, checked against its hash and validated.
func (r *Repo) readMap(h Hash) (fileMap, error) {
	data, err := r.readObject(h)
	if err != nil {
		return fileMap{}, err
	}
	m, err := decodeMap(data)
	if err != nil {
		return fileMap{}, fmt.Errorf("%w %s: %v", ErrCorrupt, h, err)
	}
	return m, nil
}

// FileObjects returns the objects the file or link entry e (of a tree of
// this repository) references: its blob, or its extent map and the blobs
// of its extents, the map read and checked. What a sparse file holds in
// the repository is the sum of these, not its Size. Call it holding
// Shared.
func (r *Repo) FileObjects(e Entry) ([]Hash, error) {
	if !e.Sparse {
		return []Hash{e.Hash}, nil
	}
	m, err := r.readMap(e.Hash)
	if err != nil {
		return nil, fmt.Errorf("file %q: %w", e.Name, err)
	}
	refs := make([]Hash, 0, 1+len(m.extents))
	refs = append(refs, e.Hash)
	for _, x := range m.extents {
		refs = append(refs, x.hash)
	}
	return refs, nil
}

// SparseContent is what the content Apply gives Target.WriteFile for a
// sparse file implements, besides io.Reader (which reads its holes as
// zeros): a target that can make holes truncates the new file to Size,
// then has WriteSparse write only the data, and never calls Read.
// WriteSparse checks every extent against its hash: where one fails, it
// returns an error matching ErrCorrupt, naming the object, and the file
// must not replace anything.
type SparseContent interface {
	io.Reader
	Size() int64
	WriteSparse(ctx context.Context, w io.WriterAt) error
}

// OpenFile streams the content of the file entry e (an entry of a tree
// of this repository): its blob, or for a sparse file its extents with
// zeros between them; the reader of a sparse file implements
// SparseContent. Everything is checked against its hash, as OpenBlob
// checks; close the reader when done.
func (r *Repo) OpenFile(e Entry) (io.ReadCloser, error) {
	if e.Kind != KindFile {
		return nil, fmt.Errorf("snapshot: open %q: a %s, not a file", e.Name, e.Kind)
	}
	if !e.Sparse {
		return r.OpenBlob(e.Hash)
	}
	m, err := r.readMap(e.Hash)
	if err != nil {
		return nil, err
	}
	if m.size != e.Size {
		return nil, fmt.Errorf("%w %s: a map of %d bytes for a file of %d", ErrCorrupt, e.Hash, m.size, e.Size)
	}
	return &sparseReader{r: r, m: m}, nil
}

// sparseReader reads a sparse file: zeros for its holes, its extents'
// blobs for its data, each checked to be its extent's length and hash.
type sparseReader struct {
	r   *Repo
	m   fileMap
	pos int64         // the offset of the next byte Read returns
	i   int           // the next extent to open
	cur io.ReadCloser // the blob of extent i-1, while pos is in it
	err error         // sticky
}

func (s *sparseReader) Size() int64 { return s.m.size }

func (s *sparseReader) Read(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	for {
		if s.cur != nil {
			x := s.m.extents[s.i-1]
			if s.pos == x.end() {
				s.err = finishBlob(s.cur, x)
				s.cur.Close()
				s.cur = nil
				if s.err != nil {
					return 0, s.err
				}
				continue
			}
			n, err := s.cur.Read(p[:min(int64(len(p)), x.end()-s.pos)])
			s.pos += int64(n)
			if err == io.EOF && s.pos == x.end() {
				err = nil // the blob ends with its extent, and was checked
			} else if err == io.EOF {
				err = fmt.Errorf("%w %s: %d bytes short of its extent's %d", ErrCorrupt, x.hash, x.end()-s.pos, x.len)
			}
			if err != nil {
				s.err = err
			}
			return n, err
		}
		if s.pos >= s.m.size {
			s.err = io.EOF
			return 0, io.EOF
		}
		if s.i < len(s.m.extents) && s.pos == s.m.extents[s.i].off {
			rc, err := s.r.OpenBlob(s.m.extents[s.i].hash)
			if err != nil {
				s.err = err
				return 0, err
			}
			s.cur = rc
			s.i++
			continue
		}
		next := s.m.size
		if s.i < len(s.m.extents) {
			next = s.m.extents[s.i].off
		}
		n := int(min(int64(len(p)), next-s.pos))
		clear(p[:n])
		s.pos += int64(n)
		return n, nil
	}
}

// finishBlob checks that the blob rc of the extent x, read up to x's
// length, ends there: its last Read meets the end, which checks its hash.
func finishBlob(rc io.Reader, x extent) error {
	var one [1]byte
	n, err := rc.Read(one[:])
	for n == 0 && err == nil {
		n, err = rc.Read(one[:])
	}
	switch {
	case n > 0:
		return fmt.Errorf("%w %s: longer than its extent's %d bytes", ErrCorrupt, x.hash, x.len)
	case err == io.EOF:
		return nil
	default:
		return err
	}
}

func (s *sparseReader) WriteSparse(ctx context.Context, w io.WriterAt) error {
	if s.pos != 0 || s.err != nil {
		return errors.New("snapshot: write a sparse file: read already")
	}
	s.err = errors.New("snapshot: read a sparse file: written already")
	buf, err := s.r.buffers.get()
	if err != nil {
		return err
	}
	defer s.r.buffers.put(buf)
	for _, x := range s.m.extents {
		if err := s.writeExtent(ctx, w, x, buf); err != nil {
			return err
		}
	}
	return nil
}

// writeExtent writes the extent x at its offset of w, checked.
func (s *sparseReader) writeExtent(ctx context.Context, w io.WriterAt, x extent, buf []byte) error {
	rc, err := s.r.OpenBlob(x.hash)
	if err != nil {
		return err
	}
	defer rc.Close()
	for done := int64(0); done < x.len; {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := rc.Read(buf[:min(int64(len(buf)), x.len-done)])
		if n > 0 {
			if _, werr := w.WriteAt(buf[:n], x.off+done); werr != nil {
				return fmt.Errorf("snapshot: write %d bytes at %d: %w", n, x.off+done, werr)
			}
			done += int64(n)
		}
		if err == io.EOF && done < x.len {
			return fmt.Errorf("%w %s: %d bytes short of its extent's %d", ErrCorrupt, x.hash, x.len-done, x.len)
		}
		if err != nil && err != io.EOF {
			return err
		}
	}
	return finishBlob(rc, x)
}

func (s *sparseReader) Close() error {
	if s.cur != nil {
		s.cur.Close()
		s.cur = nil
	}
	if s.err == nil {
		s.err = errors.New("snapshot: read after close")
	}
	return nil
}
