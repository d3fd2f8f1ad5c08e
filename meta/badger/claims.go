package badger

import (
	"context"
	"errors"
	"fmt"

	badgerdb "github.com/dgraph-io/badger/v4"

	"warren/meta"
	"warren/meta/internal/keys"
)

// GetClaim implements meta.Store.
func (s *Store) GetClaim(ctx context.Context, name string) (meta.Claim, error) {
	var c meta.Claim
	err := s.view(ctx, func(txn *badgerdb.Txn) error {
		item, err := txn.Get(keys.Claim(name))
		if errors.Is(err, badgerdb.ErrKeyNotFound) {
			return meta.ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		return getJSON(item, &c)
	})
	if err != nil {
		return meta.Claim{}, fmt.Errorf("meta: get claim %q: %w", name, err)
	}
	c.Name = name
	return c, nil
}

// PutClaim implements meta.Store.
func (s *Store) PutClaim(ctx context.Context, c meta.Claim) (meta.Claim, error) {
	if c.Name == "" {
		return meta.Claim{}, errors.New("meta: put claim: no name")
	}
	err := s.writeRecord(ctx, keys.Claim(c.Name), c.Revision == 0, c.Revision, func(rev uint64) any { c.Revision = rev; return c })
	if err != nil {
		return meta.Claim{}, fmt.Errorf("meta: put claim %q: %w", c.Name, err)
	}
	return c, nil
}
