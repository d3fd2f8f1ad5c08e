package snapshot

import (
	"bufio"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"time"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"
)

// ErrCorrupt is matched (errors.Is) by the error for an object whose
// content does not match its hash, does not decompress, or is not a valid
// tree.
var ErrCorrupt = errors.New("snapshot: corrupt object")

// An object file is one format byte, then the payload: the object's bytes
// as they are (formatRaw) or as one zstd frame (formatZstd).
const (
	formatRaw  byte = 0
	formatZstd byte = 1
)

const (
	// smallMax is the largest content held whole in memory; a bigger one
	// is streamed, and whether to compress it is decided from its first
	// smallMax bytes.
	smallMax = 1 << 20

	// maxDecoded bounds what a decoder allocates for one tree (DecodeAll)
	// and the window of a stream: far above what this package writes.
	maxDecoded = 512 << 20

	// recentObject is the age under which an object found already in
	// place may still be only in the page cache: written by a build (here
	// or in another process) that has not yet made its objects durable. A
	// build that reuses such an object makes it durable too.
	recentObject = 10 * time.Minute
)

// pays reports whether compressed is small enough to keep in place of raw:
// at most 7/8 of it.
func pays(compressed, raw int) bool { return compressed <= raw-raw/8 }

// writeSet is what one build has written: counts for BuildStats and the
// objects that must be durable before it returns. One goroutine uses it.
type writeSet struct {
	newObjects, newBytes int64
	sync                 map[Hash]struct{}
}

func (ws *writeSet) mustSync(h Hash) {
	if ws.sync == nil {
		ws.sync = make(map[Hash]struct{})
	}
	ws.sync[h] = struct{}{}
}

// present reports whether the object h is in place already; one that is
// recent is added to ws's objects to sync.
func (r *Repo) present(ws *writeSet, h Hash) (bool, error) {
	var st unix.Stat_t
	err := unix.Stat(r.objectPath(h), &st)
	if err == unix.ENOENT {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("stat object %s: %w", h, err)
	}
	if time.Since(time.Unix(st.Ctim.Unix())) < recentObject {
		ws.mustSync(h)
	}
	return true, nil
}

// putBytes stores data as an object, unless it is there already, and
// returns its hash.
func (r *Repo) putBytes(ws *writeSet, data []byte) (Hash, error) {
	h := sum(data)
	if ok, err := r.present(ws, h); err != nil || ok {
		return h, err
	}
	// out is the object file's bytes when compression pays, else nil.
	var out []byte
	if len(data) > 64 {
		enc, err := r.encoders.get()
		if err != nil {
			return h, fmt.Errorf("make zstd encoder: %w", err)
		}
		out = enc.EncodeAll(data, append(make([]byte, 0, 1+len(data)-len(data)/8), formatZstd))
		r.encoders.put(enc)
		if !pays(len(out)-1, len(data)) {
			out = nil
		}
	}
	f, err := os.CreateTemp(r.tmp, "obj-")
	if err != nil {
		return h, fmt.Errorf("write object %s: %w", h, err)
	}
	if out == nil {
		out = append(append(make([]byte, 0, 1+len(data)), formatRaw), data...)
	}
	if _, err = f.Write(out); err != nil {
		return h, r.dropTemp(f, fmt.Errorf("write object %s: %w", h, err))
	}
	return h, r.place(ws, f, h, int64(len(out)))
}

// dropTemp closes and removes a temporary file after a failure, and
// returns err.
func (r *Repo) dropTemp(f *os.File, err error) error {
	f.Close()
	os.Remove(f.Name())
	return err
}

// place closes the written temporary file f and renames it to the object
// h, unless another writer (a build here or in another process) placed
// the same object meanwhile: an object in place is never replaced, so
// the one its first writer makes durable is the one that stays.
func (r *Repo) place(ws *writeSet, f *os.File, h Hash, size int64) error {
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("write object %s: %w", h, err)
	}
	err := unix.Renameat2(unix.AT_FDCWD, f.Name(), unix.AT_FDCWD, r.objectPath(h), unix.RENAME_NOREPLACE)
	if err == unix.EINVAL { // a filesystem without RENAME_NOREPLACE
		err = os.Rename(f.Name(), r.objectPath(h))
	}
	if err == unix.EEXIST {
		os.Remove(f.Name())
		ws.mustSync(h)
		return nil
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("place object %s: %w", h, err)
	}
	ws.newObjects++
	ws.newBytes += size
	ws.mustSync(h)
	return nil
}

// putStream stores everything rd reads as a blob and returns its hash and
// size. Content of up to smallMax bytes is stored by putBytes; more is
// streamed to a temporary file, compressed or not as its first smallMax
// bytes decide, and hashed on the way.
func (r *Repo) putStream(ws *writeSet, rd io.Reader) (Hash, int64, error) {
	buf, err := r.buffers.get()
	if err != nil {
		return Hash{}, 0, err
	}
	defer r.buffers.put(buf)
	n, err := io.ReadFull(rd, buf)
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		h, err := r.putBytes(ws, buf[:n])
		return h, int64(n), err
	}
	if err != nil {
		return Hash{}, 0, err
	}

	enc, err := r.encoders.get()
	if err != nil {
		return Hash{}, 0, fmt.Errorf("make zstd encoder: %w", err)
	}
	defer r.encoders.put(enc)
	format := formatRaw
	if comp := enc.EncodeAll(buf[:smallMax], nil); pays(len(comp), smallMax) {
		format = formatZstd
	}

	f, err := os.CreateTemp(r.tmp, "obj-")
	if err != nil {
		return Hash{}, 0, fmt.Errorf("write object: %w", err)
	}
	cw := &countWriter{w: f}
	bw := bufio.NewWriterSize(cw, 256<<10)
	bw.WriteByte(format)
	var w io.Writer = bw
	if format == formatZstd {
		enc.Reset(bw)
		w = enc
	}
	hasher := sha256.New()
	mw := io.MultiWriter(hasher, w)
	size := int64(n)
	if _, err := mw.Write(buf[:n]); err != nil {
		return Hash{}, 0, r.dropTemp(f, fmt.Errorf("write object: %w", err))
	}
	m, err := io.CopyBuffer(mw, rd, buf)
	size += m
	if err != nil {
		return Hash{}, 0, r.dropTemp(f, fmt.Errorf("write object: %w", err))
	}
	if format == formatZstd {
		if err := enc.Close(); err != nil {
			return Hash{}, 0, r.dropTemp(f, fmt.Errorf("write object: compress: %w", err))
		}
	}
	if err := bw.Flush(); err != nil {
		return Hash{}, 0, r.dropTemp(f, fmt.Errorf("write object: %w", err))
	}
	var h Hash
	hasher.Sum(h[:0])
	if ok, err := r.present(ws, h); err != nil || ok {
		return h, size, r.dropTemp(f, err)
	}
	return h, size, r.place(ws, f, h, cw.n)
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// openObject opens the object h and reads its format byte.
func (r *Repo) openObject(h Hash) (*os.File, byte, error) {
	f, err := os.Open(r.objectPath(h))
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, fmt.Errorf("snapshot: object %s: %w", h, ErrNotFound)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("snapshot: open object %s: %w", h, err)
	}
	var b [1]byte
	if _, err := io.ReadFull(f, b[:]); err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("%w %s: no format byte: %v", ErrCorrupt, h, err)
	}
	if b[0] != formatRaw && b[0] != formatZstd {
		f.Close()
		return nil, 0, fmt.Errorf("%w %s: unknown format %d", ErrCorrupt, h, b[0])
	}
	return f, b[0], nil
}

// OpenBlob streams the content of the blob h. The reader checks the
// content against h at its end: the Read that meets the end returns an
// error matching ErrCorrupt, naming the object, where they differ. Missing
// objects are an error matching ErrNotFound. Close the reader when done.
func (r *Repo) OpenBlob(h Hash) (io.ReadCloser, error) {
	f, format, err := r.openObject(h)
	if err != nil {
		return nil, err
	}
	b := &blobReader{r: r, h: h, f: f, src: f, hasher: sha256.New()}
	if format == formatZstd {
		dec, err := r.decoders.get()
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("snapshot: make zstd decoder: %w", err)
		}
		if err := dec.Reset(bufio.NewReaderSize(f, 64<<10)); err != nil {
			r.decoders.put(dec)
			f.Close()
			return nil, fmt.Errorf("snapshot: object %s: start decoder: %w", h, err)
		}
		b.dec = dec
		b.src = dec
	}
	return b, nil
}

// blobReader reads a blob and checks its hash at the end.
type blobReader struct {
	r      *Repo
	h      Hash
	f      *os.File
	dec    *zstd.Decoder // nil for a raw object
	src    io.Reader
	hasher hash.Hash
	err    error // sticky: the end or the first fault
}

func (b *blobReader) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.src.Read(p)
	b.hasher.Write(p[:n])
	switch {
	case err == io.EOF:
		var got Hash
		b.hasher.Sum(got[:0])
		if got != b.h {
			b.err = fmt.Errorf("%w %s: its content hashes to %s", ErrCorrupt, b.h, got)
		} else {
			b.err = io.EOF
		}
	case err != nil && b.dec != nil:
		b.err = fmt.Errorf("%w %s: decompress: %v", ErrCorrupt, b.h, err)
	case err != nil:
		b.err = fmt.Errorf("snapshot: read object %s: %w", b.h, err)
	}
	return n, b.err
}

func (b *blobReader) Close() error {
	if b.f == nil {
		return nil
	}
	if b.dec != nil {
		b.dec.Reset(nil)
		b.r.decoders.put(b.dec)
		b.dec = nil
	}
	err := b.f.Close()
	b.f = nil
	if b.err == nil {
		b.err = errors.New("snapshot: read after close")
	}
	return err
}

// readObject reads the whole object h, checks it against its hash and
// returns its bytes.
func (r *Repo) readObject(h Hash) ([]byte, error) {
	f, format, err := r.openObject(h)
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("snapshot: read object %s: %w", h, err)
	}
	if format == formatZstd {
		dec, err := r.decoders.get()
		if err != nil {
			return nil, fmt.Errorf("snapshot: make zstd decoder: %w", err)
		}
		data, err = dec.DecodeAll(data, nil)
		r.decoders.put(dec)
		if err != nil {
			return nil, fmt.Errorf("%w %s: decompress: %v", ErrCorrupt, h, err)
		}
	}
	if got := sum(data); got != h {
		return nil, fmt.Errorf("%w %s: its content hashes to %s", ErrCorrupt, h, got)
	}
	return data, nil
}
