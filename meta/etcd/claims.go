package etcd

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"warren/meta"
	"warren/meta/internal/keys"
)

// GetClaim implements meta.Store.
func (s *Store) GetClaim(ctx context.Context, name string) (meta.Claim, error) {
	var c meta.Claim
	kv, err := s.get(ctx, string(keys.Claim(name)))
	if err == nil {
		err = decode(kv, &c)
	}
	if err != nil {
		return meta.Claim{}, fmt.Errorf("meta: get claim %q: %w", name, err)
	}
	c.Name = name
	return c, nil
}

// PutClaim implements meta.Store: a create compares the key's
// CreateRevision with 0, a replace its ModRevision with c.Revision.
func (s *Store) PutClaim(ctx context.Context, c meta.Claim) (meta.Claim, error) {
	if c.Name == "" {
		return meta.Claim{}, errors.New("meta: put claim: no name")
	}
	rev := c.Revision
	c.Revision = 0 // the stored value holds none (see decode)
	val, err := encode(c)
	if err == nil {
		key := string(keys.Claim(c.Name))
		if rev == 0 {
			rev, err = s.createValue(ctx, key, val)
		} else {
			rev, err = s.compareAndSet(ctx, key, rev, clientv3.OpPut(key, val))
		}
	}
	if err != nil {
		return meta.Claim{}, fmt.Errorf("meta: put claim %q: %w", c.Name, err)
	}
	c.Revision = rev
	return c, nil
}
