package snapshot

import (
	"fmt"
	"slices"
)

// ReadTree returns the tree h, decoded and validated: names sorted and
// unique, each a valid name (not "", "." or "..", no "/" or NUL, at most
// 255 bytes), known kinds. A missing object is an error matching
// ErrNotFound; one that does not match its hash or does not decode, an
// error matching ErrCorrupt. The zero Hash and EmptyTree() are the empty
// tree, with or without an object.
func (r *Repo) ReadTree(h Hash) (Tree, error) {
	obj, err := r.tree(h)
	if err != nil {
		return nil, err
	}
	return slices.Clone(obj.entries), nil
}

// tree returns the decoded tree h, from the cache where it is there. The
// result is shared: the caller must not change it.
func (r *Repo) tree(h Hash) (*treeObj, error) {
	if h.IsZero() || h == emptyTreeHash() {
		return &treeObj{}, nil
	}
	if obj, ok := r.trees.get(h); ok {
		return obj, nil
	}
	data, err := r.readObject(h)
	if err != nil {
		return nil, err
	}
	entries, c, err := decodeTree(data)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %v", ErrCorrupt, h, err)
	}
	obj := &treeObj{entries: entries, sum: c}
	r.trees.add(h, obj)
	return obj, nil
}

// putTree stores the tree t with the counts below it and returns its
// hash. t must be valid, and is kept in the cache: the caller must not
// change it after.
func (r *Repo) putTree(ws *writeSet, t Tree, c counts) (Hash, error) {
	h, err := r.putBytes(ws, encodeTree(nil, t, c))
	if err != nil {
		return h, fmt.Errorf("store tree: %w", err)
	}
	r.trees.add(h, &treeObj{entries: t, sum: c})
	return h, nil
}
