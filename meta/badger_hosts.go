package meta

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// Hosts and pins on Badger. Only one process opens a Badger store, so
// these records matter to that one gateway and its restarts: a restarted
// host (same id) finds the lease of its former run, which it may not
// renew, and takes its own pins over. Leases count on this machine's
// clock; a lease's id comes from the revision counter, so it is never
// given twice.

// hostRecord is a host as stored.
type hostRecord struct {
	Lease    LeaseID       `json:"lease"`
	LastBeat time.Time     `json:"lastBeat"`
	TTL      time.Duration `json:"ttl"`
}

func (h hostRecord) alive(now time.Time) bool {
	return h.Lease != 0 && now.Before(h.LastBeat.Add(h.TTL))
}

// Heartbeat implements Store.
func (s *Badger) Heartbeat(ctx context.Context, host string, lease LeaseID, ttl time.Duration) (LeaseID, error) {
	if host == "" || ttl <= 0 {
		return 0, fmt.Errorf("meta: heartbeat: host %q with ttl %v", host, ttl)
	}
	err := s.update(ctx, func(txn *badger.Txn) error {
		var h hostRecord
		found, err := getRecord(txn, hostKey(host), &h)
		if err != nil {
			return err
		}
		now := time.Now()
		if lease != 0 && (!found || h.Lease != lease || !h.alive(now)) {
			return ErrLeaseLost
		}
		if lease == 0 {
			rev, err := nextRevision(txn)
			if err != nil {
				return err
			}
			lease = LeaseID(rev)
		}
		return setJSON(txn, hostKey(host), hostRecord{Lease: lease, LastBeat: now, TTL: ttl})
	})
	if err != nil {
		return 0, fmt.Errorf("meta: heartbeat of %q: %w", host, err)
	}
	return lease, nil
}

// ListHosts implements Store.
func (s *Badger) ListHosts(ctx context.Context) ([]Host, error) {
	list := []Host{}
	now := time.Now()
	err := s.view(ctx, func(txn *badger.Txn) error {
		return scan(ctx, txn, hostPrefix, func(item *badger.Item) error {
			var h hostRecord
			if err := getJSON(item, &h); err != nil {
				return err
			}
			list = append(list, Host{ID: string(bytes.TrimPrefix(item.Key(), []byte(hostPrefix))),
				LastBeat: h.LastBeat, TTL: h.TTL, Alive: h.alive(now)})
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("meta: list hosts: %w", err)
	}
	return list, nil
}

// livePin returns the pin of k if its lease holds.
func livePin(txn *badger.Txn, k ThreadKey, now time.Time) (Pin, bool, error) {
	var p Pin
	found, err := getRecord(txn, pinKey(k), &p)
	if err != nil || !found {
		return Pin{}, false, err
	}
	var h hostRecord
	found, err = getRecord(txn, hostKey(p.HostID), &h)
	if err != nil || !found {
		return Pin{}, false, err
	}
	p.ThreadKey = k
	return p, h.Lease == p.Lease && h.alive(now), nil
}

// Pin implements Store.
func (s *Badger) Pin(ctx context.Context, k ThreadKey, host string, lease LeaseID) (Pin, error) {
	var out Pin
	err := s.update(ctx, func(txn *badger.Txn) error {
		now := time.Now()
		var h hostRecord
		found, err := getRecord(txn, hostKey(host), &h)
		if err != nil {
			return err
		}
		if !found || h.Lease != lease || !h.alive(now) {
			return ErrLeaseLost
		}
		cur, live, err := livePin(txn, k, now)
		if err != nil {
			return err
		}
		if live && cur.HostID != host {
			out = cur
			return ErrPinned
		}
		out = Pin{ThreadKey: k, HostID: host, Lease: lease}
		return setJSON(txn, pinKey(k), out)
	})
	if err != nil {
		return out, fmt.Errorf("meta: pin %q/%q to %q: %w", k.Tenant, k.Thread, host, err)
	}
	return out, nil
}

// GetPin implements Store.
func (s *Badger) GetPin(ctx context.Context, k ThreadKey) (Pin, error) {
	var out Pin
	err := s.view(ctx, func(txn *badger.Txn) error {
		p, live, err := livePin(txn, k, time.Now())
		if err != nil {
			return err
		}
		if !live {
			return ErrNotFound
		}
		out = p
		return nil
	})
	if err != nil {
		return Pin{}, fmt.Errorf("meta: pin of %q/%q: %w", k.Tenant, k.Thread, err)
	}
	return out, nil
}

// ListPins implements Store.
func (s *Badger) ListPins(ctx context.Context) ([]Pin, error) {
	list := []Pin{}
	now := time.Now()
	err := s.view(ctx, func(txn *badger.Txn) error {
		return scan(ctx, txn, pinPrefix, func(item *badger.Item) error {
			k, err := parseThreadKey(item.Key()[len(pinPrefix):])
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

// Unpin implements Store.
func (s *Badger) Unpin(ctx context.Context, k ThreadKey, host string) error {
	err := s.update(ctx, func(txn *badger.Txn) error {
		var p Pin
		found, err := getRecord(txn, pinKey(k), &p)
		if err != nil || !found || p.HostID != host {
			return err
		}
		return txn.Delete(pinKey(k))
	})
	if err != nil {
		return fmt.Errorf("meta: unpin %q/%q: %w", k.Tenant, k.Thread, err)
	}
	return nil
}

// getRecord reads the JSON record under key into v and says whether there
// was one.
func getRecord(txn *badger.Txn, key []byte, v any) (bool, error) {
	item, err := txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read: %w", err)
	}
	return true, getJSON(item, v)
}
