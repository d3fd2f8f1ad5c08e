package replica

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sync/errgroup"

	"warren/snapshot"
)

// heads finds the heads of packs, which say what each holds: in memory,
// else in the cache folder (dir/<pack hex>, a head's bytes), else in the
// store (the first bytes of the pack). A head is immutable, its pack's
// name being its hash, so a cached one is never stale about what a pack
// holds (only the store says whether it is still there); read back, it
// is checked against its name, and one that fails is read from the store
// again. Cache files are written without fsync: one lost in a crash costs
// a read of the store.
type heads struct {
	store Store
	dir   string // the cache folder; "" for none

	// mu guards known.
	mu    sync.Mutex
	known map[snapshot.Hash]*packHead
}

func newHeads(store Store, dir string) *heads {
	return &heads{store: store, dir: dir, known: make(map[snapshot.Hash]*packHead)}
}

// cached returns the head of the pack name where it is in memory or in
// the cache folder, else nil.
func (hs *heads) cached(name snapshot.Hash) *packHead {
	hs.mu.Lock()
	h := hs.known[name]
	hs.mu.Unlock()
	if h != nil || hs.dir == "" {
		return h
	}
	b, err := os.ReadFile(filepath.Join(hs.dir, name.String()))
	if err != nil || snapshot.Hash(sha256.Sum256(b)) != name {
		return nil
	}
	h, err = decodeHead(b)
	if err != nil {
		return nil
	}
	hs.mu.Lock()
	hs.known[name] = h
	hs.mu.Unlock()
	return h
}

// add remembers the head h of the pack name, whose bytes are b, checked
// against its name, and writes it to the cache folder. A cache that
// cannot be written is not an error: it only makes the next reads slower.
func (hs *heads) add(name snapshot.Hash, h *packHead, b []byte) {
	hs.mu.Lock()
	hs.known[name] = h
	hs.mu.Unlock()
	if hs.dir == "" {
		return
	}
	if err := os.MkdirAll(hs.dir, 0o700); err != nil {
		return
	}
	f, err := os.CreateTemp(hs.dir, ".tmp-")
	if err != nil {
		return
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(hs.dir, name.String()))
	}
	if err != nil {
		os.Remove(f.Name())
	}
}

// load returns the head of the pack name, read from the store where it is
// not cached: a pack the store lacks is an error matching ErrNotFound.
func (hs *heads) load(ctx context.Context, name snapshot.Hash) (*packHead, error) {
	if h := hs.cached(name); h != nil {
		return h, nil
	}
	rc, err := hs.store.Get(ctx, packKey(name))
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	h, b, err := readHead(rc, name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", packKey(name), err)
	}
	hs.add(name, h, b)
	return h, nil
}

// loadAll loads the heads of the packs names, up to parallel at a time.
func (hs *heads) loadAll(ctx context.Context, names []snapshot.Hash, parallel int) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	for _, name := range names {
		if hs.cached(name) != nil {
			continue
		}
		g.Go(func() error {
			_, err := hs.load(gctx, name)
			return err
		})
	}
	return g.Wait()
}
