package replica

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"warren/snapshot"
)

// FetchOptions tune a Fetch; the zero value works.
type FetchOptions struct {
	// Cache is the folder of pack heads (UploadOptions.Cache): a pack
	// whose head is there, and that holds nothing the repository lacks,
	// is not read at all. "" keeps none.
	Cache string
	// Parallel is how many packs are read at once (default 2).
	Parallel int
}

// FetchStats says what a Fetch found and did.
type FetchStats struct {
	Present bool  // the repository held the whole tree: the store was not read
	Packs   int64 // packs read, whole or in part
	Objects int64 // objects written to the repository
	Bytes   int64 // bytes read from the store
}

// Fetch copies the tree from the store into repo, so that repo holds
// every object it reaches (Objects over it succeeds, a restore can run).
// It reads only what repo lacks, in three steps: a walk of the tree in
// repo (nothing missing: nothing read from the store); the packs of trees
// and extent maps the manifest names, whose objects repo lacks, so that
// the walk can be made again; then the packs that hold the blobs the
// walk found missing, and of them only those objects. A pack is read
// from its start and left as soon as nothing after is wanted.
//
// Every object is checked against its hash before it is kept
// (snapshot.PutRaw, PutRawStream), the heads of packs against their
// names, and the manifest against its sum: what fails is an error
// matching ErrCorrupt (and snapshot.ErrCorrupt for an object) naming the
// pack and the object, and nothing of that pack's objects read in memory
// is kept. A tree the store has no manifest for is an error matching
// ErrNotFound. What it wrote before an error stays in repo, checked and
// durable: a Fetch run again does not read it again.
//
// Call it holding repo's Shared lock until the tree is recorded, as for
// a Build (a collection may remove objects not yet reachable from a
// recorded tree). It starts up to Parallel goroutines, which end before
// it returns.
func Fetch(ctx context.Context, repo *snapshot.Repo, store Store, tree snapshot.Hash, opts FetchOptions) (FetchStats, error) {
	if opts.Parallel <= 0 {
		opts.Parallel = defaultParallel
	}
	f := &fetcher{tree: tree, repo: repo, opts: opts}
	f.store = countingStore{Store: store, n: &f.read}
	f.heads = newHeads(f.store, opts.Cache)
	err := f.run(ctx)
	st := FetchStats{Present: f.present, Packs: f.packs.Load(), Objects: f.objects.Load(), Bytes: f.read.Load()}
	if err != nil {
		return st, fmt.Errorf("replica: fetch tree %s: %w", tree, err)
	}
	return st, nil
}

// fetcher is one Fetch's state.
type fetcher struct {
	repo  *snapshot.Repo
	store Store // counts the bytes read through it, in read
	tree  snapshot.Hash
	opts  FetchOptions
	heads *heads

	present bool
	// The figures, added to by the readers of packs.
	read, packs, objects atomic.Int64
}

func (f *fetcher) run(ctx context.Context) error {
	need, werr := f.missing(ctx)
	if werr == nil && len(need) == 0 {
		f.present = true
		return nil
	}
	if werr != nil && !errors.Is(werr, snapshot.ErrNotFound) {
		return werr
	}
	m, err := readManifest(ctx, f.store, f.tree)
	if err != nil {
		return err
	}
	if werr != nil {
		// Trees or maps are missing: every one the meta packs hold that
		// repo lacks, so that the walk can see the whole tree. (Those of
		// other trees that share the packs come too: they are small.)
		var metas []packRef
		for _, p := range m.packs {
			if p.meta {
				metas = append(metas, p)
			}
		}
		err := f.readPacks(ctx, metas, func(e entry) bool {
			return e.kind != snapshot.ObjectBlob && !f.repo.Raw().Has(e.hash)
		})
		if err != nil {
			return err
		}
		if need, err = f.missing(ctx); errors.Is(err, snapshot.ErrNotFound) {
			return fmt.Errorf("%w: %s: its packs do not hold all its trees: %w", ErrCorrupt, manifestKey(f.tree), err)
		} else if err != nil {
			return fmt.Errorf("walk the tree after its trees were fetched: %w", err)
		}
	}
	if len(need) > 0 {
		err := f.readPacks(ctx, m.packs, func(e entry) bool {
			_, ok := need[e.hash]
			return ok && !f.repo.Raw().Has(e.hash)
		})
		if err != nil {
			return err
		}
	}
	for h := range need {
		if !f.repo.Raw().Has(h) {
			return fmt.Errorf("%w: object %s is in none of the packs its manifest names", ErrCorrupt, h)
		}
	}
	return nil
}

// missing walks the tree in repo and returns the objects it lacks, with
// the walk's error (matching snapshot.ErrNotFound where a tree or an
// extent map is missing: what is below it is not known yet).
func (f *fetcher) missing(ctx context.Context) (map[snapshot.Hash]struct{}, error) {
	need := make(map[snapshot.Hash]struct{})
	err := f.repo.Raw().Objects(ctx, f.tree, func(h snapshot.Hash, _ snapshot.ObjectKind) error {
		if !f.repo.Raw().Has(h) {
			need[h] = struct{}{}
		}
		return nil
	})
	return need, err
}

// readPacks reads the objects want chooses from the packs, up to Parallel
// packs at a time. A pack whose head is known and holds nothing wanted is
// not read.
func (f *fetcher) readPacks(ctx context.Context, packs []packRef, want func(entry) bool) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(f.opts.Parallel)
	for _, p := range packs {
		if h := f.heads.cached(p.name); h != nil && !anyWanted(h, want) {
			continue
		}
		g.Go(func() error { return f.readPack(gctx, p.name, want) })
	}
	return g.Wait()
}

func anyWanted(h *packHead, want func(entry) bool) bool {
	for _, e := range h.entries {
		if want(e) {
			return true
		}
	}
	return false
}

// maxBatch bounds the small objects of a pack held in memory before they
// are stored, for packs another writer filled past this package's size.
const maxBatch = 64 << 20

// readPack reads the pack name from its start and stores the objects want
// chooses: each big one as it is read, the small ones in one PutRaw per
// pack, so that a corrupt one keeps nothing of the others read with it.
func (f *fetcher) readPack(ctx context.Context, name snapshot.Hash, want func(entry) bool) error {
	key := packKey(name)
	rc, err := f.store.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("read pack: %w", err)
	}
	defer rc.Close()
	f.packs.Add(1)
	r := io.Reader(rc)
	h, b, err := readHead(r, name)
	if err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	f.heads.add(name, h, b)
	last := -1
	for i, e := range h.entries {
		if want(e) {
			last = i
		}
	}
	var batch []snapshot.RawObject
	var batched int64
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := f.repo.Raw().PutRaw(ctx, batch); err != nil {
			return objectErr(key, err)
		}
		f.objects.Add(int64(len(batch)))
		batch, batched = nil, 0
		return nil
	}
	for _, e := range h.entries[:last+1] {
		if !want(e) {
			if _, err := io.CopyN(io.Discard, r, e.size); err != nil {
				return packReadErr(key, e, err)
			}
			continue
		}
		if e.size > bigObject {
			body := &cutReader{r: io.LimitReader(r, e.size), left: e.size}
			if err := f.repo.Raw().PutRawStream(ctx, e.hash, body); err != nil {
				if body.cut {
					return packReadErr(key, e, io.ErrUnexpectedEOF)
				}
				return objectErr(key, err)
			}
			if _, err := io.Copy(io.Discard, body); err != nil { // left unread where repo held it
				return packReadErr(key, e, err)
			}
			f.objects.Add(1)
			continue
		}
		data := make([]byte, e.size)
		if _, err := io.ReadFull(r, data); err != nil {
			return packReadErr(key, e, err)
		}
		batch = append(batch, snapshot.RawObject{Hash: e.hash, Data: data})
		if batched += e.size; batched > maxBatch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// objectErr is the error for objects of the pack key that repo refused:
// corrupt ones are the store's fault, and say so.
func objectErr(key string, err error) error {
	if errors.Is(err, snapshot.ErrCorrupt) {
		return fmt.Errorf("%w: %s: %w", ErrCorrupt, key, err)
	}
	return fmt.Errorf("%s: %w", key, err)
}

// packReadErr is the error for a read of the object e in the pack key
// that failed: a pack that ends before its head says is corrupt.
func packReadErr(key string, e entry, err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return fmt.Errorf("%w: %s: cut short in object %s", ErrCorrupt, key, e.hash)
	}
	return fmt.Errorf("%s: read object %s: %w", key, e.hash, err)
}

// cutReader notes whether its reader ended before left bytes.
type cutReader struct {
	r    io.Reader
	left int64
	cut  bool
}

func (c *cutReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.left -= int64(n)
	if err == io.EOF && c.left > 0 {
		c.cut = true
	}
	return n, err
}

// countingStore counts the bytes read through its Gets.
type countingStore struct {
	Store
	n *atomic.Int64
}

func (c countingStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	rc, err := c.Store.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	return countReader{rc, c.n}, nil
}

// countReader counts the bytes read through it.
type countReader struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c countReader) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}
