package badger

import (
	"context"
	"errors"
	"fmt"

	badgerdb "github.com/dgraph-io/badger/v4"

	"warren/meta"
	"warren/meta/internal/keys"
)

// Histories on Badger are records like bindings: JSON under their key,
// with the revision from the counter stored inside. A history may be a
// thousand times a binding's size (meta.MaxHistoryBytes); Open's value
// threshold keeps even that in the LSM tree, so the copies each rewrite
// leaves behind go with compaction rather than pile up in the value log.

// GetHistory implements meta.Store.
func (s *Store) GetHistory(ctx context.Context, k meta.ThreadKey) (meta.History, error) {
	var h meta.History
	err := s.view(ctx, func(txn *badgerdb.Txn) error {
		item, err := txn.Get(keys.History(k))
		if errors.Is(err, badgerdb.ErrKeyNotFound) {
			return meta.ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		return getJSON(item, &h)
	})
	if err != nil {
		return meta.History{}, fmt.Errorf("meta: get history of %q/%q: %w", k.Tenant, k.Thread, err)
	}
	// The key is the identity; JSON cannot carry ids that are not UTF-8.
	h.ThreadKey = k
	return h, nil
}

// PutHistory implements meta.Store. The size is checked on the encoding
// etcd would store (keys.EncodeHistory), so both engines refuse the same
// histories; what Badger stores is that and its revision.
func (s *Store) PutHistory(ctx context.Context, h meta.History) (meta.History, error) {
	if _, err := keys.EncodeHistory(h); err != nil {
		return meta.History{}, fmt.Errorf("meta: put history of %q/%q: %w", h.Tenant, h.Thread, err)
	}
	err := s.writeRecord(ctx, keys.History(h.ThreadKey), h.Revision == 0, h.Revision, func(rev uint64) any { h.Revision = rev; return h })
	if err != nil {
		return meta.History{}, fmt.Errorf("meta: put history of %q/%q: %w", h.Tenant, h.Thread, err)
	}
	return h, nil
}

// DeleteHistory implements meta.Store.
func (s *Store) DeleteHistory(ctx context.Context, k meta.ThreadKey) error {
	err := s.update(ctx, func(txn *badgerdb.Txn) error {
		if err := txn.Delete(keys.History(k)); err != nil {
			return fmt.Errorf("delete: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("meta: delete history of %q/%q: %w", k.Tenant, k.Thread, err)
	}
	return nil
}

// ListHistories implements meta.Store: one scan of the tenant's prefix,
// whose key order is thread order.
func (s *Store) ListHistories(ctx context.Context, tenant string) ([]meta.History, error) {
	list := []meta.History{}
	err := s.view(ctx, func(txn *badgerdb.Txn) error {
		return scan(ctx, txn, string(keys.Histories(tenant)), func(item *badgerdb.Item) error {
			k, err := keys.ParseHistory(item.Key())
			if err != nil {
				return err
			}
			var h meta.History
			if err := getJSON(item, &h); err != nil {
				return fmt.Errorf("history of %q/%q: %w", k.Tenant, k.Thread, err)
			}
			h.ThreadKey = k
			list = append(list, h)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("meta: list histories of %q: %w", tenant, err)
	}
	return list, nil
}
