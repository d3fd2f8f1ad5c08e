package meta

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// NextJobSeq implements Store.
func (s *Badger) NextJobSeq(ctx context.Context, k ThreadKey) (uint64, error) {
	var seq uint64
	err := s.update(ctx, func(txn *badger.Txn) error {
		var err error
		seq, err = bumpCounter(txn, jobSeqKey(k))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("meta: next job number of %q/%q: %w", k.Tenant, k.Thread, err)
	}
	return seq, nil
}

// CreateJob implements Store.
func (s *Badger) CreateJob(ctx context.Context, j Job) (Job, error) {
	err := s.writeRecord(ctx, jobKey(j.ThreadKey, j.Seq), true, 0, func(rev uint64) any { j.Revision = rev; return j })
	if err != nil {
		return Job{}, fmt.Errorf("meta: create job %d of %q/%q: %w", j.Seq, j.Tenant, j.Thread, err)
	}
	return j, nil
}

// UpdateJob implements Store.
func (s *Badger) UpdateJob(ctx context.Context, j Job) (Job, error) {
	err := s.writeRecord(ctx, jobKey(j.ThreadKey, j.Seq), false, j.Revision, func(rev uint64) any { j.Revision = rev; return j })
	if err != nil {
		return Job{}, fmt.Errorf("meta: update job %d of %q/%q: %w", j.Seq, j.Tenant, j.Thread, err)
	}
	return j, nil
}

// GetJob implements Store.
func (s *Badger) GetJob(ctx context.Context, k ThreadKey, seq uint64) (Job, error) {
	var j Job
	err := s.view(ctx, func(txn *badger.Txn) error {
		item, err := txn.Get(jobKey(k, seq))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		return getJSON(item, &j)
	})
	if err != nil {
		return Job{}, fmt.Errorf("meta: get job %d of %q/%q: %w", seq, k.Tenant, k.Thread, err)
	}
	j.ThreadKey, j.Seq = k, seq
	return j, nil
}

// ListJobs implements Store.
func (s *Badger) ListJobs(ctx context.Context, k ThreadKey) ([]Job, error) {
	list := []Job{}
	prefix := jobsKey(k)
	err := s.view(ctx, func(txn *badger.Txn) error {
		return scan(ctx, txn, string(prefix), func(item *badger.Item) error {
			rest := item.Key()[len(prefix):]
			if len(rest) != 8 {
				return fmt.Errorf("%w: job key %q", errBadKey, item.Key())
			}
			var j Job
			if err := getJSON(item, &j); err != nil {
				return fmt.Errorf("job key %q: %w", item.Key(), err)
			}
			j.ThreadKey, j.Seq = k, binary.BigEndian.Uint64(rest)
			list = append(list, j)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("meta: list jobs of %q/%q: %w", k.Tenant, k.Thread, err)
	}
	return list, nil
}

// DeleteJobs implements Store.
func (s *Badger) DeleteJobs(ctx context.Context, k ThreadKey) error {
	prefix := jobsKey(k)
	err := s.update(ctx, func(txn *badger.Txn) error {
		var keys [][]byte
		err := scan(ctx, txn, string(prefix), func(item *badger.Item) error {
			keys = append(keys, item.KeyCopy(nil))
			return nil
		})
		if err != nil {
			return err
		}
		keys = append(keys, jobSeqKey(k))
		for _, key := range keys {
			if err := txn.Delete(key); err != nil {
				return fmt.Errorf("delete: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("meta: delete jobs of %q/%q: %w", k.Tenant, k.Thread, err)
	}
	return nil
}

// bumpCounter adds one to the uint64 counter under key in txn (a missing
// counter is zero) and returns its new value.
func bumpCounter(txn *badger.Txn, key []byte) (uint64, error) {
	var n uint64
	item, err := txn.Get(key)
	switch {
	case errors.Is(err, badger.ErrKeyNotFound):
	case err != nil:
		return 0, fmt.Errorf("read counter: %w", err)
	default:
		err := item.Value(func(v []byte) error {
			if len(v) != 8 {
				return fmt.Errorf("counter is %d bytes, want 8", len(v))
			}
			n = binary.BigEndian.Uint64(v)
			return nil
		})
		if err != nil {
			return 0, fmt.Errorf("read counter: %w", err)
		}
	}
	n++
	if err := txn.Set(key, binary.BigEndian.AppendUint64(nil, n)); err != nil {
		return 0, fmt.Errorf("bump counter: %w", err)
	}
	return n, nil
}
