package replicas

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"warren/snapshot"
	"warren/snapshot/replica"
)

// fetchingDir is the folder, under a tenant's cache folder, of the trees
// whose fetch began and has not ended: a tree fetched in part has its
// root in the repository already (the trees come before the blobs), so
// its root alone does not tell a whole tree.
const fetchingDir = "fetching"

// Whole reports whether repo holds the whole of tree as far as this room
// can tell without reading it: its root is there, and no fetch of it was
// cut short. A tree a Build wrote is whole as soon as its root is (a
// Build writes its objects in one log, made durable at once).
func (r *Replicas) Whole(tenant string, repo *snapshot.Repo, tree snapshot.Hash) bool {
	if tree.IsZero() {
		return true
	}
	if !repo.Raw().Has(tree) {
		return false
	}
	_, err := os.Lstat(r.fetchingMark(tenant, tree))
	return errors.Is(err, os.ErrNotExist)
}

func (r *Replicas) fetchingMark(tenant string, tree snapshot.Hash) string {
	return filepath.Join(r.cfg.CacheDir(tenant), fetchingDir, tree.String())
}

// Fetch makes repo hold the whole of tree, bringing what it lacks from
// the store (replica.Fetch: every object checked by its hash before it
// is kept). A tree the store has no manifest of is an error matching
// replica.ErrNotFound, one whose copy fails its checks replica.ErrCorrupt;
// other errors say the store could not be read, and mark it down. The
// caller holds repo's shared lock (a collection must not sweep what is
// fetched before a history names it; the histories name every tree
// fetched here). One fetch of a tree runs at a time.
func (r *Replicas) Fetch(ctx context.Context, tenant string, repo *snapshot.Repo, tree snapshot.Hash) (replica.FetchStats, error) {
	if r.Whole(tenant, repo, tree) {
		return replica.FetchStats{Present: true}, nil
	}
	unlock, err := r.fetches.Lock(ctx, tenant+"\x00"+tree.String())
	if err != nil {
		return replica.FetchStats{}, err
	}
	defer unlock()
	if r.Whole(tenant, repo, tree) { // fetched while this one waited
		return replica.FetchStats{Present: true}, nil
	}
	mark := r.fetchingMark(tenant, tree)
	if err := os.MkdirAll(filepath.Dir(mark), 0o700); err != nil {
		return replica.FetchStats{}, fmt.Errorf("fetch tree %s: %w", tree, err)
	}
	if err := os.WriteFile(mark, nil, 0o600); err != nil {
		return replica.FetchStats{}, fmt.Errorf("fetch tree %s: %w", tree, err)
	}
	start := time.Now()
	st, err := replica.Fetch(ctx, repo, r.store, tree, replica.FetchOptions{Cache: r.cfg.CacheDir(tenant)})
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, replica.ErrNotFound) && !errors.Is(err, replica.ErrCorrupt) {
			r.mu.Lock()
			r.up, r.lastErr = false, err
			r.mu.Unlock()
		}
		return st, err
	}
	r.mu.Lock()
	r.up, r.lastErr = true, nil // the store answered
	r.mu.Unlock()
	// The mark goes once the objects are durable (PutRaw makes them so).
	if err := os.Remove(mark); err != nil {
		return st, fmt.Errorf("fetch tree %s: %w", tree, err)
	}
	r.log.Info("fetched a tree from the snapshot store", "tenant", tenant, "tree", tree, "objects", st.Objects,
		"packs", st.Packs, "bytes", st.Bytes, "took", time.Since(start).Round(time.Millisecond))
	return st, nil
}
