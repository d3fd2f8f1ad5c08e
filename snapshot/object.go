package snapshot

import (
	"bufio"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"

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
)

// pays reports whether compressed is small enough to keep in place of raw:
// at most 7/8 of it.
func pays(compressed, raw int) bool { return compressed <= raw-raw/8 }

// writeSet is what one build has written: counts for BuildStats and its
// log, made at its first new object. One goroutine uses it.
type writeSet struct {
	newObjects, newBytes int64
	log                  *logWriter // nil until the first new object
}

// present reports whether the object h is there already: in this build's
// log, in a log of this Repo's, or loose. Every one of them is durable
// (or will be with this build's log): a loose object is, or the log it
// was spread from is still there. Other Repos' logs are not looked at:
// an object found only there is written again, and spread once.
func (r *Repo) present(ws *writeSet, h Hash) (bool, error) {
	if ws.log != nil {
		if _, ok := ws.log.recs[h]; ok {
			return true, nil
		}
	}
	if r.pendingHas(h) {
		return true, nil
	}
	var st unix.Stat_t
	err := unix.Stat(r.objectPath(h), &st)
	if err == unix.ENOENT {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("stat object %s: %w", h, err)
	}
	return true, nil
}

// logFor returns the build's log, made if need be.
func (r *Repo) logFor(ws *writeSet) (*logWriter, error) {
	if ws.log == nil {
		w, err := r.createLog()
		if err != nil {
			return nil, err
		}
		ws.log = w
	}
	return ws.log, nil
}

// putBytes stores data as an object, unless it is there already, and
// returns its hash.
func (r *Repo) putBytes(ws *writeSet, data []byte) (Hash, error) {
	h := sum(data)
	if ok, err := r.present(ws, h); err != nil || ok {
		return h, err
	}
	payload, format := data, formatRaw
	if len(data) > 64 {
		enc, err := r.encoders.get()
		if err != nil {
			return h, fmt.Errorf("make zstd encoder: %w", err)
		}
		out := enc.EncodeAll(data, make([]byte, 0, len(data)-len(data)/8))
		r.encoders.put(enc)
		if pays(len(out), len(data)) {
			payload, format = out, formatZstd
		}
	}
	w, err := r.logFor(ws)
	if err != nil {
		return h, fmt.Errorf("write object %s: %w", h, err)
	}
	n, err := w.add(h, format, payload)
	if err != nil {
		return h, fmt.Errorf("write object %s: %w", h, err)
	}
	ws.newObjects++
	ws.newBytes += n
	return h, nil
}

// putStream stores everything rd reads as a blob and returns its hash and
// size. Content of up to smallMax bytes is stored by putBytes; more is
// streamed to the build's log, compressed or not as its first smallMax
// bytes decide, and hashed on the way; if it is found in place after
// all, the log is cut back.
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

	lw, err := r.logFor(ws)
	if err != nil {
		return Hash{}, 0, fmt.Errorf("write object: %w", err)
	}
	start, cw := lw.begin()
	var w io.Writer = cw
	if format == formatZstd {
		enc.Reset(cw)
		w = enc
	}
	hasher := sha256.New()
	mw := io.MultiWriter(hasher, w)
	size := int64(n)
	if _, err := mw.Write(buf[:n]); err != nil {
		return Hash{}, 0, fmt.Errorf("write object: %w", err)
	}
	m, err := io.CopyBuffer(mw, rd, buf)
	size += m
	if err != nil {
		return Hash{}, 0, fmt.Errorf("write object: %w", err)
	}
	if format == formatZstd {
		if err := enc.Close(); err != nil {
			return Hash{}, 0, fmt.Errorf("write object: compress: %w", err)
		}
	}
	var h Hash
	hasher.Sum(h[:0])
	if ok, err := r.present(ws, h); err != nil || ok {
		if err == nil {
			err = lw.drop(start)
		}
		return h, size, err
	}
	if err := lw.end(start, h, format, cw.n); err != nil {
		return h, size, fmt.Errorf("write object %s: %w", h, err)
	}
	ws.newObjects++
	ws.newBytes += recordHeader + cw.n
	return h, size, nil
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

// OpenBlob streams the content of the blob h. The reader checks the
// content against h at its end: the Read that meets the end returns an
// error matching ErrCorrupt, naming the object, where they differ. Missing
// objects are an error matching ErrNotFound. Close the reader when done.
func (r *Repo) OpenBlob(h Hash) (io.ReadCloser, error) {
	src, err := r.openObject(h)
	if err != nil {
		return nil, err
	}
	b := &blobReader{r: r, h: h, obj: src, src: src.rd, hasher: sha256.New()}
	if src.format == formatZstd {
		dec, err := r.decoders.get()
		if err != nil {
			src.close()
			return nil, fmt.Errorf("snapshot: make zstd decoder: %w", err)
		}
		if err := dec.Reset(bufio.NewReaderSize(src.rd, 64<<10)); err != nil {
			r.decoders.put(dec)
			src.close()
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
	obj    *source       // nil once closed
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
	if b.obj == nil {
		return nil
	}
	if b.dec != nil {
		b.dec.Reset(nil)
		b.r.decoders.put(b.dec)
		b.dec = nil
	}
	err := b.obj.close()
	b.obj = nil
	if b.err == nil {
		b.err = errors.New("snapshot: read after close")
	}
	return err
}

// readObject reads the whole object h, checks it against its hash and
// returns its bytes.
func (r *Repo) readObject(h Hash) ([]byte, error) {
	src, err := r.openObject(h)
	if err != nil {
		return nil, err
	}
	data := make([]byte, src.size)
	_, err = io.ReadFull(src.rd, data)
	src.close()
	if err != nil {
		return nil, fmt.Errorf("snapshot: read object %s: %w", h, err)
	}
	if src.format == formatZstd {
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
