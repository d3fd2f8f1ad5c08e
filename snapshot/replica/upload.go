package replica

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"warren/snapshot"
)

// UploadOptions tune an Upload; the zero value works.
type UploadOptions struct {
	// Cache is a folder where the heads of packs are kept, one file each,
	// so that the packs of a base need not be read again from the store
	// (one per store; Fetch shares it). "" keeps none.
	Cache string
	// Bases are trees already in the store whose objects this one mostly
	// shares: the previous checkpoint of the thread, the tree it was
	// forked from. The objects that their manifests' packs hold are not
	// sent again: the new manifest names those packs. A base without a
	// manifest in the store is passed over.
	Bases []snapshot.Hash
	// PackSize is the size packs are filled to (default 16 MiB): larger
	// means fewer requests, smaller less to send again after a cut.
	PackSize int64
	// Parallel is how many packs are sent at once (default 2). Each holds
	// up to PackSize bytes in memory while it is sent.
	Parallel int
	// Refresh, if positive, is the age (ModTime against this host's
	// clock) past which a pack that the store holds already is put again
	// rather than taken as it is. A collection (Sweep) deletes a pack no
	// manifest names once it is older than its grace: a pack this upload
	// found there, old, and will name only in its manifest at its end,
	// could go meanwhile. Put again, it is as young as one this upload
	// sent, so a grace longer than Refresh plus the longest upload keeps
	// it (see the package doc, Collection). 0 never puts a pack again:
	// for a store that no Sweep collects.
	Refresh time.Duration
}

// Defaults of UploadOptions and FetchOptions.
const (
	defaultPackSize = 16 << 20
	defaultParallel = 2

	// bigObject is the stored size past which an object goes alone in a
	// pack, streamed from the repository to the store (and back): never
	// held whole in memory.
	bigObject = 4 << 20
)

func (o UploadOptions) withDefaults() UploadOptions {
	if o.PackSize <= 0 {
		o.PackSize = defaultPackSize
	}
	if o.Parallel <= 0 {
		o.Parallel = defaultParallel
	}
	return o
}

// UploadStats says what an Upload found and did.
type UploadStats struct {
	Present   bool  // the store held the tree's manifest already: nothing else was done
	Objects   int64 // objects the tree reaches
	Reused    int64 // of them, found in the bases' packs
	Packed    int64 // of them, put in new packs
	Packs     int64 // new packs
	PacksSent int64 // of them, sent (the others the store held: an upload cut short sent them)
	BytesSent int64 // bytes sent: packs and manifest
	Manifest  int   // packs the manifest names
}

// Upload copies the tree from repo to the store: every object it reaches
// that the bases' packs do not hold, in packs, then its manifest, last,
// so that a manifest in the store means every object of its tree is.
//
// Objects go in packs of about PackSize bytes in the order Objects visits
// them, trees and extent maps (which a fetch needs first, to learn what
// else it needs) apart from blobs; an object over 4 MiB goes alone,
// streamed. Each object is read in its stored form and checked on the
// way (snapshot.OpenRaw): a corrupt one fails the upload, naming it. The
// packs are made alike every time from one repository, tree and bases,
// and a pack is sent only where the store lacks its name: so an upload
// cut at any point (an error, a kill) and run again sends only the packs
// the store lacks, and a tree whose manifest is there is not read at all.
//
// It does not retry: a failed request fails the upload, which may be run
// again (the caller's backoff). The tree must stay recorded in repo while
// it runs (an object collected meanwhile fails it, ErrNotFound). It
// starts Parallel goroutines to send packs (and up to 4×Parallel to read
// the heads of the bases' packs), which end before it returns.
func Upload(ctx context.Context, repo *snapshot.Repo, store Store, tree snapshot.Hash, opts UploadOptions) (UploadStats, error) {
	opts = opts.withDefaults()
	u := &uploader{repo: repo, store: store, tree: tree, opts: opts, uses: make(map[snapshot.Hash]bool), stopping: make(chan struct{})}
	st, err := u.run(ctx)
	if err != nil {
		return st, fmt.Errorf("replica: upload tree %s: %w", tree, err)
	}
	return st, nil
}

// uploader is one Upload's state.
type uploader struct {
	repo  *snapshot.Repo
	store Store
	tree  snapshot.Hash
	opts  UploadOptions
	heads *heads
	// known is where the bases' packs hold each object; set before the
	// walk, read by the producer only.
	known map[snapshot.Hash]packRef

	// stopping is closed at the first failure of a sender; failed is
	// that failure, read once the senders have ended.
	stopping chan struct{}
	stopOnce sync.Once
	failed   error

	// mu guards the fields below it, which the senders update.
	mu   sync.Mutex
	st   UploadStats
	uses map[snapshot.Hash]bool // the packs the manifest names: meta or not
}

// errStopped is the producer's error once a sender failed: that failure
// is the upload's.
var errStopped = errors.New("stopped: a pack could not be sent")

// stop records err, the first failure of a sender, and tells the
// producer and the other senders to begin nothing more. A nil err is
// nothing.
func (u *uploader) stop(err error) {
	if err != nil {
		u.stopOnce.Do(func() {
			u.failed = err
			close(u.stopping)
		})
	}
}

// stopped reports whether a sender failed.
func (u *uploader) stopped() bool {
	select {
	case <-u.stopping:
		return true
	default:
		return false
	}
}

func (u *uploader) run(ctx context.Context) (UploadStats, error) {
	mkey := manifestKey(u.tree)
	if _, err := u.store.Stat(ctx, mkey); err == nil {
		return UploadStats{Present: true}, nil
	} else if !errors.Is(err, ErrNotFound) {
		return UploadStats{}, fmt.Errorf("look for the manifest: %w", err)
	}
	u.heads = newHeads(u.store, u.opts.Cache)
	if err := u.learnBases(ctx); err != nil {
		return UploadStats{}, err
	}

	// The senders do not cancel each other: after a failure, the packs
	// being sent are sent to their end (a run again finds them there),
	// and no other is begun.
	var senders sync.WaitGroup
	out := make(chan *outPack)
	for range u.opts.Parallel {
		senders.Go(func() {
			for p := range out {
				if !u.stopped() {
					u.stop(u.send(ctx, p))
				}
				p.close()
			}
		})
	}
	perr := u.produce(ctx, out)
	close(out)
	senders.Wait()
	if u.failed != nil {
		return u.stats(), u.failed // perr is then errStopped
	}
	if perr != nil {
		return u.stats(), perr
	}

	m := manifest{tree: u.tree}
	for name, meta := range u.uses {
		m.packs = append(m.packs, packRef{name: name, meta: meta})
	}
	b := encodeManifest(m)
	if err := u.store.Put(ctx, mkey, bytes.NewReader(b), int64(len(b))); err != nil {
		return u.stats(), fmt.Errorf("write the manifest: %w", err)
	}
	st := u.stats()
	st.BytesSent += int64(len(b))
	st.Manifest = len(m.packs)
	return st, nil
}

func (u *uploader) stats() UploadStats {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.st
}

// learnBases reads the manifests of the bases and the heads of their
// packs, and fills known.
func (u *uploader) learnBases(ctx context.Context) error {
	u.known = make(map[snapshot.Hash]packRef)
	var refs []packRef
	for _, base := range u.opts.Bases {
		m, err := readManifest(ctx, u.store, base)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("base %s: %w", base, err)
		}
		refs = append(refs, m.packs...)
	}
	names := make([]snapshot.Hash, len(refs))
	for i, p := range refs {
		names[i] = p.name
	}
	if err := u.heads.loadAll(ctx, names, 4*u.opts.Parallel); err != nil {
		return fmt.Errorf("the bases' packs: %w", err)
	}
	for _, p := range refs {
		for _, e := range u.heads.cached(p.name).entries {
			if _, ok := u.known[e.hash]; !ok {
				u.known[e.hash] = p
			}
		}
	}
	return nil
}

// outPack is a pack made, to be sent.
type outPack struct {
	meta    bool
	head    []byte
	name    snapshot.Hash
	entries []entry
	objects [][]byte      // the objects' stored forms; or
	stream  io.ReadCloser // a big object's, alone; closed by whoever ends with the pack
	size    int64         // of the objects
}

// close lets go of a pack's stream, if any.
func (p *outPack) close() {
	if p.stream != nil {
		p.stream.Close()
		p.stream = nil
	}
}

// builder fills one pack of one kind.
type builder struct {
	meta    bool
	entries []entry
	objects [][]byte
	size    int64
}

// take returns the pack filled so far, with its head, and starts another.
func (b *builder) take() *outPack {
	p := &outPack{meta: b.meta, entries: b.entries, objects: b.objects, size: b.size}
	p.head, p.name = encodeHead(p.entries)
	b.entries, b.objects, b.size = nil, nil, 0
	return p
}

// produce walks the tree, reads the objects the bases' packs do not hold
// into packs and hands each, full, to out.
func (u *uploader) produce(ctx context.Context, out chan<- *outPack) error {
	emit := func(p *outPack) error {
		select {
		case out <- p:
			return nil
		case <-u.stopping:
			p.close()
			return errStopped
		case <-ctx.Done():
			p.close()
			return ctx.Err()
		}
	}
	meta, data := &builder{meta: true}, &builder{}
	err := u.repo.Raw().Objects(ctx, u.tree, func(h snapshot.Hash, kind snapshot.ObjectKind) error {
		u.mu.Lock()
		u.st.Objects++
		ref, reused := u.known[h]
		if reused {
			u.st.Reused++
			u.uses[ref.name] = ref.meta
		} else {
			u.st.Packed++
		}
		u.mu.Unlock()
		if reused {
			return nil
		}
		b := data
		if kind != snapshot.ObjectBlob {
			b = meta
		}
		rc, size, err := u.repo.Raw().OpenRaw(h)
		if err != nil {
			return err
		}
		e := entry{hash: h, kind: kind, size: size}
		if size > bigObject {
			p := &outPack{meta: b.meta, entries: []entry{e}, stream: rc, size: size}
			p.head, p.name = encodeHead(p.entries)
			return emit(p)
		}
		obj, err := readExact(rc, size)
		rc.Close()
		if err != nil {
			return fmt.Errorf("read object %s: %w", h, err)
		}
		if len(b.entries) > 0 && (b.size+size > u.opts.PackSize || len(b.entries) == writeEntries) {
			if err := emit(b.take()); err != nil {
				return err
			}
		}
		b.entries = append(b.entries, e)
		b.objects = append(b.objects, obj)
		b.size += size
		return nil
	})
	if err != nil {
		return err
	}
	for _, b := range []*builder{meta, data} {
		if len(b.entries) > 0 {
			if err := emit(b.take()); err != nil {
				return err
			}
		}
	}
	return nil
}

// readExact reads all of r, which holds size bytes, to its end (where
// snapshot.OpenRaw's reader checks the object).
func readExact(r io.Reader, size int64) ([]byte, error) {
	buf := make([]byte, size)
	n := 0
	er := &exactReader{r: r, left: size}
	for {
		m, err := er.Read(buf[n:])
		n += m
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// send puts the pack p in the store, unless the store holds its name
// already (an earlier upload cut short sent it) and that copy is younger
// than Refresh, and notes it for the manifest.
func (u *uploader) send(ctx context.Context, p *outPack) error {
	key := packKey(p.name)
	sent := false
	info, err := u.store.Stat(ctx, key)
	stale := err == nil && u.opts.Refresh > 0 && time.Since(info.ModTime) > u.opts.Refresh
	if errors.Is(err, ErrNotFound) || stale {
		body := []io.Reader{bytes.NewReader(p.head)}
		for _, o := range p.objects {
			body = append(body, bytes.NewReader(o))
		}
		if p.stream != nil {
			body = append(body, p.stream)
		}
		size := int64(len(p.head)) + p.size
		if err := u.store.Put(ctx, key, io.MultiReader(body...), size); err != nil {
			return fmt.Errorf("send pack %s: %w", p.name, err)
		}
		sent = true
	} else if err != nil {
		return fmt.Errorf("look for pack %s: %w", p.name, err)
	}
	h, err := decodeHead(p.head)
	if err != nil {
		return fmt.Errorf("pack %s: %w", p.name, err) // a bug: the head was just made
	}
	u.heads.add(p.name, h, p.head)
	u.mu.Lock()
	defer u.mu.Unlock()
	u.uses[p.name] = p.meta
	u.st.Packs++
	if sent {
		u.st.PacksSent++
		u.st.BytesSent += int64(len(p.head)) + p.size
	}
	return nil
}
