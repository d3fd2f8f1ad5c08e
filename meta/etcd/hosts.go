package etcd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"warren/meta"
	"warren/meta/internal/keys"
)

// Hosts and pins on etcd. A host's lease is an etcd lease: its heartbeat
// is a keepalive, and etcd itself expires it when heartbeats stop. A pin
// is a key put with the owner's lease, so etcd deletes it the moment the
// lease expires: a pin that exists is a live pin, and taking a thread over
// is one transaction that finds the key absent. The host's record (its
// last heartbeat) is kept apart, without the lease, so that a host that
// went away still shows in the list.

// Heartbeat implements meta.Store.
func (s *Store) Heartbeat(ctx context.Context, host string, lease meta.LeaseID, ttl time.Duration) (meta.LeaseID, error) {
	if host == "" || ttl <= 0 {
		return 0, fmt.Errorf("meta: heartbeat: host %q with ttl %v", host, ttl)
	}
	err := s.call(ctx, func(ctx context.Context) error {
		if lease == 0 {
			// etcd counts leases in whole seconds.
			g, err := s.client.Grant(ctx, int64(math.Ceil(ttl.Seconds())))
			if err != nil {
				return err
			}
			lease = meta.LeaseID(g.ID)
			return nil
		}
		_, err := s.client.KeepAliveOnce(ctx, clientv3.LeaseID(lease))
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return meta.ErrLeaseLost
		}
		return err
	})
	if err == nil {
		var val string
		val, err = encode(keys.HostRecord{Lease: lease, LastBeat: time.Now().UTC(), TTL: ttl})
		if err == nil {
			err = s.call(ctx, func(ctx context.Context) error {
				_, err := s.kv.Put(ctx, string(keys.Host(host)), val)
				return err
			})
		}
	}
	if err != nil {
		return 0, fmt.Errorf("meta: heartbeat of %q: %w", host, err)
	}
	return lease, nil
}

// ListHosts implements meta.Store. Whether a host is alive is its lease's
// remaining time, asked of etcd, whose clock is the one that expires it.
func (s *Store) ListHosts(ctx context.Context) ([]meta.Host, error) {
	list := []meta.Host{}
	var leases []meta.LeaseID
	err := s.scan(ctx, keys.HostPrefix, func(kv *mvccpb.KeyValue) error {
		var h keys.HostRecord
		if err := decode(kv, &h); err != nil {
			return err
		}
		list = append(list, meta.Host{ID: string(bytes.TrimPrefix(kv.Key, []byte(keys.HostPrefix))), LastBeat: h.LastBeat, TTL: h.TTL})
		leases = append(leases, h.Lease)
		return nil
	})
	for i := 0; err == nil && i < len(list); i++ {
		err = s.call(ctx, func(ctx context.Context) error {
			r, err := s.client.TimeToLive(ctx, clientv3.LeaseID(leases[i]))
			if err != nil {
				return err
			}
			list[i].Alive = r.TTL > 0
			return nil
		})
	}
	if err != nil {
		return nil, fmt.Errorf("meta: list hosts: %w", err)
	}
	return list, nil
}

// Pin implements meta.Store.
func (s *Store) Pin(ctx context.Context, k meta.ThreadKey, host string, lease meta.LeaseID) (meta.Pin, error) {
	key := string(keys.Pin(k))
	want := meta.Pin{HostID: host, Lease: lease}
	val, err := encode(want)
	if err != nil {
		return meta.Pin{}, err
	}
	want.ThreadKey = k
	// Absent: take it. Ours under an older lease (a former run of this
	// host): move it to this lease, if nobody changed it in between.
	for {
		var resp *clientv3.TxnResponse
		err := s.call(ctx, func(ctx context.Context) (err error) {
			resp, err = s.kv.Txn(ctx).
				If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
				Then(clientv3.OpPut(key, val, clientv3.WithLease(clientv3.LeaseID(lease)))).
				Else(clientv3.OpGet(key)).
				Commit()
			return err
		})
		if err == nil && resp.Succeeded {
			return want, nil
		}
		if err != nil {
			return meta.Pin{}, pinError(k, host, err)
		}
		kvs := resp.Responses[0].GetResponseRange().GetKvs()
		if len(kvs) == 0 {
			continue // it expired in between: try again
		}
		var cur meta.Pin
		if err := decode(kvs[0], &cur); err != nil {
			return meta.Pin{}, pinError(k, host, err)
		}
		cur.ThreadKey = k
		if cur.HostID != host {
			return cur, pinError(k, host, meta.ErrPinned)
		}
		if cur.Lease == lease {
			return want, nil
		}
		err = s.call(ctx, func(ctx context.Context) (err error) {
			resp, err = s.kv.Txn(ctx).
				If(clientv3.Compare(clientv3.ModRevision(key), "=", kvs[0].ModRevision)).
				Then(clientv3.OpPut(key, val, clientv3.WithLease(clientv3.LeaseID(lease)))).
				Commit()
			return err
		})
		if err != nil {
			return meta.Pin{}, pinError(k, host, err)
		}
		if resp.Succeeded {
			return want, nil
		}
	}
}

// pinError words a failed pin; a put under an expired lease is a lost
// lease.
func pinError(k meta.ThreadKey, host string, err error) error {
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		err = meta.ErrLeaseLost
	}
	return fmt.Errorf("meta: pin %q/%q to %q: %w", k.Tenant, k.Thread, host, err)
}

// GetPin implements meta.Store.
func (s *Store) GetPin(ctx context.Context, k meta.ThreadKey) (meta.Pin, error) {
	kv, err := s.get(ctx, string(keys.Pin(k)))
	var p meta.Pin
	if err == nil {
		err = decode(kv, &p)
	}
	if err != nil {
		return meta.Pin{}, fmt.Errorf("meta: pin of %q/%q: %w", k.Tenant, k.Thread, err)
	}
	p.ThreadKey = k
	return p, nil
}

// ListPins implements meta.Store. A pin that exists is live: etcd deletes it
// with its lease.
func (s *Store) ListPins(ctx context.Context) ([]meta.Pin, error) {
	list := []meta.Pin{}
	err := s.scan(ctx, keys.PinPrefix, func(kv *mvccpb.KeyValue) error {
		k, err := keys.ParseThreadKey(kv.Key[len(keys.PinPrefix):])
		if err != nil {
			return err
		}
		var p meta.Pin
		if err := decode(kv, &p); err != nil {
			return err
		}
		p.ThreadKey = k
		list = append(list, p)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("meta: list pins: %w", err)
	}
	return list, nil
}

// Unpin implements meta.Store.
func (s *Store) Unpin(ctx context.Context, k meta.ThreadKey, host string) error {
	key := string(keys.Pin(k))
	kv, err := s.get(ctx, key)
	if errors.Is(err, meta.ErrNotFound) {
		return nil
	}
	var p meta.Pin
	if err == nil {
		err = decode(kv, &p)
	}
	if err == nil && p.HostID == host {
		err = s.call(ctx, func(ctx context.Context) error {
			_, err := s.kv.Txn(ctx).
				If(clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).
				Then(clientv3.OpDelete(key)).
				Commit()
			return err
		})
	}
	if err != nil {
		return fmt.Errorf("meta: unpin %q/%q: %w", k.Tenant, k.Thread, err)
	}
	return nil
}
