package etcd

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"warren/meta"
	"warren/meta/internal/keys"
)

// historyPage bounds the histories one range read of ListHistories
// returns: each may be meta.MaxHistoryBytes, so a page of them is at most
// 8 MiB, where a page of defaultListPage could be half a gigabyte.
const historyPage = 8

// GetHistory implements meta.Store.
func (s *Store) GetHistory(ctx context.Context, k meta.ThreadKey) (meta.History, error) {
	var h meta.History
	kv, err := s.get(ctx, string(keys.History(k)))
	if err == nil {
		err = decode(kv, &h)
	}
	if err != nil {
		return meta.History{}, fmt.Errorf("meta: get history of %q/%q: %w", k.Tenant, k.Thread, err)
	}
	// The key is the identity; JSON cannot carry ids that are not UTF-8.
	h.ThreadKey = k
	return h, nil
}

// PutHistory implements meta.Store: a create compares the key's
// CreateRevision with 0, a replace its ModRevision with h.Revision, each
// in one transaction.
func (s *Store) PutHistory(ctx context.Context, h meta.History) (meta.History, error) {
	rev, err := s.putHistory(ctx, h)
	if err != nil {
		return meta.History{}, fmt.Errorf("meta: put history of %q/%q: %w", h.Tenant, h.Thread, err)
	}
	h.Revision = rev
	return h, nil
}

func (s *Store) putHistory(ctx context.Context, h meta.History) (uint64, error) {
	// The stored value holds no revision (see encode).
	val, err := keys.EncodeHistory(h)
	if err != nil {
		return 0, err
	}
	key := string(keys.History(h.ThreadKey))
	if h.Revision == 0 {
		return s.createValue(ctx, key, string(val))
	}
	return s.compareAndSet(ctx, key, h.Revision, clientv3.OpPut(key, string(val)))
}

// DeleteHistory implements meta.Store.
func (s *Store) DeleteHistory(ctx context.Context, k meta.ThreadKey) error {
	err := s.call(ctx, func(ctx context.Context) error {
		_, err := s.kv.Delete(ctx, string(keys.History(k)))
		return err
	})
	if err != nil {
		return fmt.Errorf("meta: delete history of %q/%q: %w", k.Tenant, k.Thread, err)
	}
	return nil
}

// ListHistories implements meta.Store: a range read of the tenant's
// prefix, whose key order is thread order, in pages of historyPage.
func (s *Store) ListHistories(ctx context.Context, tenant string) ([]meta.History, error) {
	list := []meta.History{}
	err := s.scanPages(ctx, string(keys.Histories(tenant)), min(s.listPage, historyPage), func(kv *mvccpb.KeyValue) error {
		k, err := keys.ParseHistory(kv.Key)
		if err != nil {
			return err
		}
		var h meta.History
		if err := decode(kv, &h); err != nil {
			return fmt.Errorf("history of %q/%q: %w", k.Tenant, k.Thread, err)
		}
		h.ThreadKey = k
		list = append(list, h)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("meta: list histories of %q: %w", tenant, err)
	}
	return list, nil
}
