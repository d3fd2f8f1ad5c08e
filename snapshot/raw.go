package snapshot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
)

// Objects in their stored form, for copying a repository's objects
// elsewhere and back (package snapshot/replica): the walk that lists what
// a tree needs, reads of an object as its file holds it (so that an
// upload needs no recompression) and writes of objects fetched from
// elsewhere, each checked against its hash before anything of it is kept.

// ObjectKind is what an object is to the trees that reference it.
type ObjectKind uint8

const (
	ObjectTree ObjectKind = 1 + iota // a folder's entries (tree.go)
	ObjectBlob                       // a file's content, a link's target, or one extent of a sparse file
	ObjectMap                        // a sparse file's extent map (sparse.go)
)

func (k ObjectKind) String() string {
	switch k {
	case ObjectTree:
		return "tree"
	case ObjectBlob:
		return "blob"
	case ObjectMap:
		return "map"
	}
	return fmt.Sprintf("ObjectKind(%d)", uint8(k))
}

// RawObject is an object in its stored form.
type RawObject struct {
	Hash Hash
	// Data is what the object's file holds: its format byte (0 raw,
	// 1 zstd) and its payload. Its content, uncompressed, hashes to Hash.
	Data []byte
}

// Raw is a repository's objects in their stored form, for copies of them
// elsewhere (package replica): the walk of what a tree reaches, and
// objects read and written as their files hold them. A view of Repo's,
// apart from its everyday calls.
type Raw struct{ r *Repo }

// Raw returns r's objects in their stored form.
func (r *Repo) Raw() Raw { return Raw{r} }

// Objects calls visit with every object reachable from the tree: the
// trees, the blobs, and the extent maps of sparse files with the blobs of
// their extents, each once, depth first: a folder's tree before its
// entries, the entries in name order, a map before its extents. Trees and
// maps are read, checked and validated as ReadTree reads them (a missing
// one is an error matching ErrNotFound, naming it and its path); blobs are
// not read, nor looked for. The zero Hash and the empty tree, which every
// repository reads without an object, are not visited. An error visit
// returns stops the walk and is returned as it is. Call it holding Shared,
// or on a tree that stays recorded meanwhile.
//
// It keeps the set of the objects visited: about 100 bytes an object.
func (x Raw) Objects(ctx context.Context, tree Hash, visit func(h Hash, kind ObjectKind) error) error {
	r := x.r
	w := objectWalk{r: r, ctx: ctx, visit: visit, empty: emptyTreeHash(), seen: make(map[Hash]struct{})}
	return w.tree(tree, "")
}

// objectWalk is one call of Objects; one goroutine uses it.
type objectWalk struct {
	r     *Repo
	ctx   context.Context
	visit func(Hash, ObjectKind) error
	empty Hash
	seen  map[Hash]struct{}
}

// first reports whether h is seen for the first time, and marks it.
func (w *objectWalk) first(h Hash) bool {
	if _, ok := w.seen[h]; ok {
		return false
	}
	w.seen[h] = struct{}{}
	return true
}

// tree visits the tree h, at rel, and what it references.
func (w *objectWalk) tree(h Hash, rel string) error {
	if h.IsZero() || h == w.empty || !w.first(h) {
		return nil
	}
	if err := w.ctx.Err(); err != nil {
		return err
	}
	obj, err := w.r.tree(h)
	if err != nil {
		return fmt.Errorf("snapshot: objects: folder %q: %w", "/"+rel, err)
	}
	if err := w.visit(h, ObjectTree); err != nil {
		return err
	}
	for _, e := range obj.entries {
		path := join(rel, e.Name)
		switch {
		case e.Kind == KindDir:
			if err := w.tree(e.Hash, path); err != nil {
				return err
			}
		case e.Sparse:
			if !w.first(e.Hash) {
				continue // the map was visited, and its extents with it
			}
			m, err := w.r.readMap(e.Hash)
			if err != nil {
				return fmt.Errorf("snapshot: objects: file %q: %w", "/"+path, err)
			}
			if err := w.visit(e.Hash, ObjectMap); err != nil {
				return err
			}
			for _, x := range m.extents {
				if w.first(x.hash) {
					if err := w.visit(x.hash, ObjectBlob); err != nil {
						return err
					}
				}
			}
		default:
			if w.first(e.Hash) {
				if err := w.visit(e.Hash, ObjectBlob); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// Has reports whether the repository holds the object h where a Build
// would find it in place: loose, or in a log of this Repo's. (An object
// found only in another process's log, which may not be durable yet, is
// not counted: a Fetch writes it again, as a Build would.) A failure to
// look is reported as false: the caller then writes the object again,
// which is harmless.
func (x Raw) Has(h Hash) bool {
	r := x.r
	ok, err := r.present(&writeSet{}, h)
	return err == nil && ok
}

// ReadRaw returns the object h in its stored form, whole, checked against
// its hash: a missing object is an error matching ErrNotFound, one that
// fails its check an error matching ErrCorrupt. It holds the object in
// memory: for one that may be large, use OpenRaw.
func (x Raw) ReadRaw(h Hash) (RawObject, error) {
	r := x.r
	src, err := r.openObject(h)
	if err != nil {
		return RawObject{}, err
	}
	data := make([]byte, 1+src.size)
	data[0] = src.format
	_, err = io.ReadFull(src.rd, data[1:])
	src.close()
	if err != nil {
		return RawObject{}, fmt.Errorf("snapshot: read object %s: %w", h, err)
	}
	if err := r.checkPayload(bytes.NewReader(data[1:]), data[0], h); err != nil {
		return RawObject{}, fmt.Errorf("snapshot: read object %s: %w", h, err)
	}
	return RawObject{Hash: h, Data: data}, nil
}

// OpenRaw streams the object h in its stored form (RawObject.Data) and
// returns its size in bytes. The reader checks the object at its end: the
// Read that meets the end returns an error matching ErrCorrupt, naming
// the object, where it fails its hash. (A raw object is hashed as it is
// read; a compressed one of up to 1 MiB is kept and decompressed at the
// end, a bigger one read a second time then: a read does not start
// goroutines.) Missing objects are an error matching ErrNotFound. Close
// the reader when done.
func (x Raw) OpenRaw(h Hash) (io.ReadCloser, int64, error) {
	r := x.r
	src, err := r.openObject(h)
	if err != nil {
		return nil, 0, err
	}
	rr := &rawReader{r: r, h: h, src: src, format: src.format, left: src.size}
	switch {
	case src.format == formatRaw:
		rr.hasher = sha256.New()
	case src.size <= smallMax:
		rr.kept = make([]byte, 0, src.size)
	}
	return rr, 1 + src.size, nil
}

// rawReader reads an object's stored form and checks it at its end.
type rawReader struct {
	r         *Repo
	h         Hash
	src       *source // nil once closed
	format    byte
	sentFirst bool      // the format byte was returned
	left      int64     // payload bytes not read yet
	hasher    hash.Hash // a raw payload's hash, as read
	kept      []byte    // a small compressed payload, as read
	err       error     // sticky: the end or the first fault
}

func (rr *rawReader) Read(p []byte) (int, error) {
	if rr.err != nil {
		return 0, rr.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if !rr.sentFirst {
		rr.sentFirst = true
		p[0] = rr.format
		return 1, nil
	}
	if rr.left == 0 {
		rr.err = rr.check()
		return 0, rr.err
	}
	if int64(len(p)) > rr.left {
		p = p[:rr.left]
	}
	n, err := rr.src.rd.Read(p)
	rr.left -= int64(n)
	if rr.hasher != nil {
		rr.hasher.Write(p[:n])
	} else if rr.kept != nil {
		rr.kept = append(rr.kept, p[:n]...)
	}
	switch {
	case err == io.EOF && rr.left > 0:
		rr.err = fmt.Errorf("%w %s: %d bytes short of its size", ErrCorrupt, rr.h, rr.left)
	case err != nil && err != io.EOF:
		rr.err = fmt.Errorf("snapshot: read object %s: %w", rr.h, err)
	}
	return n, rr.err
}

// check checks the payload read against the object's hash, at its end.
func (rr *rawReader) check() error {
	switch {
	case rr.hasher != nil:
		var got Hash
		rr.hasher.Sum(got[:0])
		if got != rr.h {
			return fmt.Errorf("%w %s: its content hashes to %s", ErrCorrupt, rr.h, got)
		}
	case rr.kept != nil:
		if err := rr.r.checkPayload(bytes.NewReader(rr.kept), rr.format, rr.h); err != nil {
			return err
		}
	default:
		// A big compressed object: read again and decompressed. Objects do
		// not change in place; this one may have been spread meanwhile,
		// which openObject finds.
		src, err := rr.r.openObject(rr.h)
		if err != nil {
			return fmt.Errorf("snapshot: check object %s: %w", rr.h, err)
		}
		err = rr.r.checkPayload(src.rd, src.format, rr.h)
		src.close()
		if err != nil {
			return err
		}
	}
	return io.EOF
}

func (rr *rawReader) Close() error {
	if rr.src == nil {
		return nil
	}
	err := rr.src.close()
	rr.src = nil
	rr.kept = nil
	if rr.err == nil {
		rr.err = errors.New("snapshot: read after close")
	}
	return err
}

// PutRaw stores objects fetched from elsewhere, in their stored form,
// durable on return: each is checked against its hash first (decompressed
// if need be, and hashed); one that fails is an error matching ErrCorrupt
// naming it, and then nothing of the call is kept. Objects the repository
// holds already (Has) are not written again. Like a Build, it appends the
// new objects to one log, fsync'ed once with its folder, readable at once
// and spread later. Call it holding Shared until the tree they belong to
// is recorded, as for a Build: until then a collection may remove them.
func (x Raw) PutRaw(ctx context.Context, objs []RawObject) error {
	r := x.r
	var ws writeSet
	fail := func(err error) error {
		if ws.log != nil {
			ws.log.abort(r.tmp)
		}
		return fmt.Errorf("snapshot: put objects: %w", err)
	}
	for _, o := range objs {
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		if o.Hash.IsZero() {
			return fail(errors.New("an object with the zero hash"))
		}
		if len(o.Data) == 0 {
			return fail(fmt.Errorf("%w %s: no format byte", ErrCorrupt, o.Hash))
		}
		format, payload := o.Data[0], o.Data[1:]
		if err := r.checkPayload(bytes.NewReader(payload), format, o.Hash); err != nil {
			return fail(err)
		}
		ok, err := r.present(&ws, o.Hash)
		if err != nil {
			return fail(err)
		}
		if ok {
			continue
		}
		w, err := r.logFor(&ws)
		if err != nil {
			return fail(fmt.Errorf("write object %s: %w", o.Hash, err))
		}
		if _, err := w.add(o.Hash, format, payload); err != nil {
			return fail(fmt.Errorf("write object %s: %w", o.Hash, err))
		}
	}
	return r.commitPut(&ws, fail)
}

// commitPut makes the log of a PutRaw or PutRawStream durable and
// publishes it; fail is the call's failure, which removes the log.
func (r *Repo) commitPut(ws *writeSet, fail func(error) error) error {
	if ws.log == nil {
		return nil
	}
	if err := ws.log.commit(r.tmpFd); err != nil {
		return fail(err)
	}
	r.publish(ws.log)
	return nil
}

// PutRawStream stores one object fetched from elsewhere, read from data
// in its stored form (RawObject.Data) to its end, without holding it in
// memory: it is written to a log as it is read, and checked on the way
// (decompressed and hashed). One that fails its hash, or does not
// decompress, is an error matching ErrCorrupt naming it, and nothing of
// it is kept; a read error of data is returned, wrapped, and nothing is
// kept either. Durable on return, as PutRaw's objects are, and under the
// same lock rule. If the repository holds h already (Has), data is not
// read.
func (x Raw) PutRawStream(ctx context.Context, h Hash, data io.Reader) error {
	r := x.r
	if h.IsZero() {
		return errors.New("snapshot: put object: the zero hash")
	}
	var ws writeSet
	if ok, err := r.present(&ws, h); err != nil || ok {
		if err != nil {
			err = fmt.Errorf("snapshot: put object %s: %w", h, err)
		}
		return err
	}
	fail := func(err error) error {
		if ws.log != nil {
			ws.log.abort(r.tmp)
		}
		return fmt.Errorf("snapshot: put object %s: %w", h, err)
	}
	data = ctxReader{ctx: ctx, r: data}
	var first [1]byte
	if _, err := io.ReadFull(data, first[:]); err != nil {
		if err == io.EOF {
			err = fmt.Errorf("%w %s: no format byte", ErrCorrupt, h)
		}
		return fail(err)
	}
	format := first[0]
	if format != formatRaw && format != formatZstd {
		return fail(fmt.Errorf("%w %s: unknown format %d", ErrCorrupt, h, format))
	}
	w, err := r.logFor(&ws)
	if err != nil {
		return fail(err)
	}
	start, cw := w.begin()
	hasher := sha256.New()
	if format == formatRaw {
		_, err = io.Copy(io.MultiWriter(hasher, cw), data)
	} else {
		err = r.decodeInto(h, hasher, io.TeeReader(data, cw))
		if err == nil {
			// Whatever the decoder left unread is part of the payload
			// too: it reads alike from the log.
			_, err = io.Copy(cw, data)
		}
	}
	if err != nil {
		return fail(err)
	}
	var got Hash
	hasher.Sum(got[:0])
	if got != h {
		return fail(fmt.Errorf("%w %s: its content hashes to %s", ErrCorrupt, h, got))
	}
	if err := w.end(start, h, format, cw.n); err != nil {
		return fail(err)
	}
	return r.commitPut(&ws, fail)
}

// decodeInto decompresses src, the zstd payload of the object h, into
// dst. Bytes that do not decompress are an error matching ErrCorrupt; a
// read error of src is returned, wrapped.
func (r *Repo) decodeInto(h Hash, dst io.Writer, src io.Reader) error {
	dec, err := r.decoders.get()
	if err != nil {
		return fmt.Errorf("make zstd decoder: %w", err)
	}
	defer r.decoders.put(dec)
	defer dec.Reset(nil)
	rs := &readErr{r: src}
	err = dec.Reset(rs)
	if err == nil {
		_, err = io.Copy(dst, dec)
	}
	if rs.err != nil {
		return fmt.Errorf("read payload: %w", rs.err)
	}
	if err != nil {
		return fmt.Errorf("%w %s: decompress: %v", ErrCorrupt, h, err)
	}
	return nil
}

// readErr remembers the first error of its reader other than io.EOF, so
// that a read error is told from bytes that do not decompress.
type readErr struct {
	r   io.Reader
	err error
}

func (e *readErr) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF && e.err == nil {
		e.err = err
	}
	return n, err
}

// ctxReader fails its reads once ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
