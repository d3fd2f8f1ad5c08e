package etcd

import (
	"context"
	"encoding/binary"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"warren/meta"
	"warren/meta/internal/keys"
)

// NextJobSeq implements meta.Store.
//
// The counter is the etcd version of the thread's jobseq key: etcd counts
// the puts to a key since it was created (1 for the first) and starts
// again after a delete, which is exactly the promise (1 first, one more
// each call, back to 1 after DeleteJobs). One put that returns the key's
// previous version is atomic in etcd, so concurrent callers on any host
// each get their own number in a single round trip, where a
// read-then-compare loop would retry under contention. The value is
// empty; the version is the count.
func (s *Store) NextJobSeq(ctx context.Context, k meta.ThreadKey) (uint64, error) {
	seq, err := s.nextJobSeq(ctx, k)
	if err != nil {
		return 0, fmt.Errorf("meta: next job number of %q/%q: %w", k.Tenant, k.Thread, err)
	}
	return seq, nil
}

func (s *Store) nextJobSeq(ctx context.Context, k meta.ThreadKey) (uint64, error) {
	var resp *clientv3.PutResponse
	err := s.call(ctx, func(ctx context.Context) (err error) {
		resp, err = s.kv.Put(ctx, string(keys.JobSeq(k)), "", clientv3.WithPrevKV())
		return err
	})
	if err != nil {
		return 0, err
	}
	if resp.PrevKv == nil {
		return 1, nil
	}
	return uint64(resp.PrevKv.Version) + 1, nil
}

// CreateJob implements meta.Store.
func (s *Store) CreateJob(ctx context.Context, j meta.Job) (meta.Job, error) {
	stored := j
	stored.Revision = 0 // the stored value holds none; see encode
	rev, err := s.create(ctx, string(keys.Job(j.ThreadKey, j.Seq)), stored)
	if err != nil {
		return meta.Job{}, fmt.Errorf("meta: create job %d of %q/%q: %w", j.Seq, j.Tenant, j.Thread, err)
	}
	j.Revision = rev
	return j, nil
}

// UpdateJob implements meta.Store.
func (s *Store) UpdateJob(ctx context.Context, j meta.Job) (meta.Job, error) {
	rev, err := s.updateJob(ctx, j)
	if err != nil {
		return meta.Job{}, fmt.Errorf("meta: update job %d of %q/%q: %w", j.Seq, j.Tenant, j.Thread, err)
	}
	j.Revision = rev
	return j, nil
}

func (s *Store) updateJob(ctx context.Context, j meta.Job) (uint64, error) {
	want := j.Revision
	j.Revision = 0
	val, err := encode(j)
	if err != nil {
		return 0, err
	}
	key := string(keys.Job(j.ThreadKey, j.Seq))
	return s.compareAndSet(ctx, key, want, clientv3.OpPut(key, val))
}

// GetJob implements meta.Store.
func (s *Store) GetJob(ctx context.Context, k meta.ThreadKey, seq uint64) (meta.Job, error) {
	var j meta.Job
	kv, err := s.get(ctx, string(keys.Job(k, seq)))
	if err == nil {
		err = decode(kv, &j)
	}
	if err != nil {
		return meta.Job{}, fmt.Errorf("meta: get job %d of %q/%q: %w", seq, k.Tenant, k.Thread, err)
	}
	j.ThreadKey, j.Seq = k, seq
	return j, nil
}

// ListJobs implements meta.Store. The number is big-endian in the key, so
// key order is numeric order.
func (s *Store) ListJobs(ctx context.Context, k meta.ThreadKey) ([]meta.Job, error) {
	list := []meta.Job{}
	prefix := keys.Jobs(k)
	err := s.scan(ctx, string(prefix), func(kv *mvccpb.KeyValue) error {
		rest := kv.Key[len(prefix):]
		if len(rest) != 8 {
			return fmt.Errorf("%w: job key %q", keys.ErrBadKey, kv.Key)
		}
		var j meta.Job
		if err := decode(kv, &j); err != nil {
			return fmt.Errorf("job key %q: %w", kv.Key, err)
		}
		j.ThreadKey, j.Seq = k, binary.BigEndian.Uint64(rest)
		list = append(list, j)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("meta: list jobs of %q/%q: %w", k.Tenant, k.Thread, err)
	}
	return list, nil
}

// DeleteJobs implements meta.Store: the thread's job records and its counter go
// in one transaction, so no caller sees the counter restarted while old
// records with its next numbers are still there.
func (s *Store) DeleteJobs(ctx context.Context, k meta.ThreadKey) error {
	err := s.call(ctx, func(ctx context.Context) error {
		_, err := s.kv.Txn(ctx).Then(
			clientv3.OpDelete(string(keys.Jobs(k)), clientv3.WithPrefix()),
			clientv3.OpDelete(string(keys.JobSeq(k))),
		).Commit()
		return err
	})
	if err != nil {
		return fmt.Errorf("meta: delete jobs of %q/%q: %w", k.Tenant, k.Thread, err)
	}
	return nil
}
