package badger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	badgerdb "github.com/dgraph-io/badger/v4"

	"warren/meta"
	"warren/meta/internal/keys"
)

// Hosts and pins on Badger. Only one process opens a Badger store, so
// these records matter to that one gateway and its restarts: a restarted
// host (same id) finds the lease of its former run, which it may not
// renew, and takes its own pins over. Leases count on this machine's
// clock; a lease's id comes from the revision counter, so it is never
// given twice.

// Heartbeat implements meta.Store.
func (s *Store) Heartbeat(ctx context.Context, host string, lease meta.LeaseID, ttl time.Duration) (meta.LeaseID, error) {
	if host == "" || ttl <= 0 {
		return 0, fmt.Errorf("meta: heartbeat: host %q with ttl %v", host, ttl)
	}
	err := s.update(ctx, func(txn *badgerdb.Txn) error {
		var h keys.HostRecord
		found, err := getRecord(txn, keys.Host(host), &h)
		if err != nil {
			return err
		}
		now := time.Now()
		if lease != 0 && (!found || h.Lease != lease || !h.Alive(now)) {
			return meta.ErrLeaseLost
		}
		if lease == 0 {
			rev, err := nextRevision(txn)
			if err != nil {
				return err
			}
			lease = meta.LeaseID(rev)
		}
		return setJSON(txn, keys.Host(host), keys.HostRecord{Lease: lease, LastBeat: now, TTL: ttl})
	})
	if err != nil {
		return 0, fmt.Errorf("meta: heartbeat of %q: %w", host, err)
	}
	return lease, nil
}

// ListHosts implements meta.Store.
func (s *Store) ListHosts(ctx context.Context) ([]meta.Host, error) {
	list := []meta.Host{}
	now := time.Now()
	err := s.view(ctx, func(txn *badgerdb.Txn) error {
		return scan(ctx, txn, keys.HostPrefix, func(item *badgerdb.Item) error {
			var h keys.HostRecord
			if err := getJSON(item, &h); err != nil {
				return err
			}
			list = append(list, meta.Host{ID: string(bytes.TrimPrefix(item.Key(), []byte(keys.HostPrefix))),
				LastBeat: h.LastBeat, TTL: h.TTL, Alive: h.Alive(now)})
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("meta: list hosts: %w", err)
	}
	return list, nil
}

// livePin returns the pin of k if its lease holds.
func livePin(txn *badgerdb.Txn, k meta.ThreadKey, now time.Time) (meta.Pin, bool, error) {
	var p meta.Pin
	found, err := getRecord(txn, keys.Pin(k), &p)
	if err != nil || !found {
		return meta.Pin{}, false, err
	}
	var h keys.HostRecord
	found, err = getRecord(txn, keys.Host(p.HostID), &h)
	if err != nil || !found {
		return meta.Pin{}, false, err
	}
	p.ThreadKey = k
	return p, h.Lease == p.Lease && h.Alive(now), nil
}

// Pin implements meta.Store.
func (s *Store) Pin(ctx context.Context, k meta.ThreadKey, host string, lease meta.LeaseID) (meta.Pin, error) {
	var out meta.Pin
	err := s.update(ctx, func(txn *badgerdb.Txn) error {
		now := time.Now()
		var h keys.HostRecord
		found, err := getRecord(txn, keys.Host(host), &h)
		if err != nil {
			return err
		}
		if !found || h.Lease != lease || !h.Alive(now) {
			return meta.ErrLeaseLost
		}
		cur, live, err := livePin(txn, k, now)
		if err != nil {
			return err
		}
		if live && cur.HostID != host {
			out = cur
			return meta.ErrPinned
		}
		out = meta.Pin{ThreadKey: k, HostID: host, Lease: lease}
		return setJSON(txn, keys.Pin(k), out)
	})
	if err != nil {
		return out, fmt.Errorf("meta: pin %q/%q to %q: %w", k.Tenant, k.Thread, host, err)
	}
	return out, nil
}

// GetPin implements meta.Store.
func (s *Store) GetPin(ctx context.Context, k meta.ThreadKey) (meta.Pin, error) {
	var out meta.Pin
	err := s.view(ctx, func(txn *badgerdb.Txn) error {
		p, live, err := livePin(txn, k, time.Now())
		if err != nil {
			return err
		}
		if !live {
			return meta.ErrNotFound
		}
		out = p
		return nil
	})
	if err != nil {
		return meta.Pin{}, fmt.Errorf("meta: pin of %q/%q: %w", k.Tenant, k.Thread, err)
	}
	return out, nil
}

// ListPins implements meta.Store.
func (s *Store) ListPins(ctx context.Context) ([]meta.Pin, error) {
	list := []meta.Pin{}
	now := time.Now()
	err := s.view(ctx, func(txn *badgerdb.Txn) error {
		return scan(ctx, txn, keys.PinPrefix, func(item *badgerdb.Item) error {
			k, err := keys.ParseThreadKey(item.Key()[len(keys.PinPrefix):])
			if err != nil {
				return err
			}
			p, live, err := livePin(txn, k, now)
			if err != nil {
				return err
			}
			if live {
				list = append(list, p)
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("meta: list pins: %w", err)
	}
	return list, nil
}

// Unpin implements meta.Store.
func (s *Store) Unpin(ctx context.Context, k meta.ThreadKey, host string) error {
	err := s.update(ctx, func(txn *badgerdb.Txn) error {
		var p meta.Pin
		found, err := getRecord(txn, keys.Pin(k), &p)
		if err != nil || !found || p.HostID != host {
			return err
		}
		return txn.Delete(keys.Pin(k))
	})
	if err != nil {
		return fmt.Errorf("meta: unpin %q/%q: %w", k.Tenant, k.Thread, err)
	}
	return nil
}

// getRecord reads the JSON record under key into v and says whether there
// was one.
func getRecord(txn *badgerdb.Txn, key []byte, v any) (bool, error) {
	item, err := txn.Get(key)
	if errors.Is(err, badgerdb.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read: %w", err)
	}
	return true, getJSON(item, v)
}
