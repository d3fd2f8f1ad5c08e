package badger

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	badgerdb "github.com/dgraph-io/badger/v4"

	"warren/meta"
	"warren/meta/internal/keys"
)

// NextJobSeq implements meta.Store.
func (s *Store) NextJobSeq(ctx context.Context, k meta.ThreadKey) (uint64, error) {
	var seq uint64
	err := s.update(ctx, func(txn *badgerdb.Txn) error {
		var err error
		seq, err = bumpCounter(txn, keys.JobSeq(k))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("meta: next job number of %q/%q: %w", k.Tenant, k.Thread, err)
	}
	return seq, nil
}

// CreateJob implements meta.Store.
func (s *Store) CreateJob(ctx context.Context, j meta.Job) (meta.Job, error) {
	err := s.writeRecord(ctx, keys.Job(j.ThreadKey, j.Seq), true, 0, func(rev uint64) any { j.Revision = rev; return j })
	if err != nil {
		return meta.Job{}, fmt.Errorf("meta: create job %d of %q/%q: %w", j.Seq, j.Tenant, j.Thread, err)
	}
	return j, nil
}

// UpdateJob implements meta.Store.
func (s *Store) UpdateJob(ctx context.Context, j meta.Job) (meta.Job, error) {
	err := s.writeRecord(ctx, keys.Job(j.ThreadKey, j.Seq), false, j.Revision, func(rev uint64) any { j.Revision = rev; return j })
	if err != nil {
		return meta.Job{}, fmt.Errorf("meta: update job %d of %q/%q: %w", j.Seq, j.Tenant, j.Thread, err)
	}
	return j, nil
}

// GetJob implements meta.Store.
func (s *Store) GetJob(ctx context.Context, k meta.ThreadKey, seq uint64) (meta.Job, error) {
	var j meta.Job
	err := s.view(ctx, func(txn *badgerdb.Txn) error {
		item, err := txn.Get(keys.Job(k, seq))
		if errors.Is(err, badgerdb.ErrKeyNotFound) {
			return meta.ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		return getJSON(item, &j)
	})
	if err != nil {
		return meta.Job{}, fmt.Errorf("meta: get job %d of %q/%q: %w", seq, k.Tenant, k.Thread, err)
	}
	j.ThreadKey, j.Seq = k, seq
	return j, nil
}

// ListJobs implements meta.Store.
func (s *Store) ListJobs(ctx context.Context, k meta.ThreadKey) ([]meta.Job, error) {
	list := []meta.Job{}
	prefix := keys.Jobs(k)
	err := s.view(ctx, func(txn *badgerdb.Txn) error {
		return scan(ctx, txn, string(prefix), func(item *badgerdb.Item) error {
			rest := item.Key()[len(prefix):]
			if len(rest) != 8 {
				return fmt.Errorf("%w: job key %q", keys.ErrBadKey, item.Key())
			}
			var j meta.Job
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

// DeleteJobs implements meta.Store.
func (s *Store) DeleteJobs(ctx context.Context, k meta.ThreadKey) error {
	prefix := keys.Jobs(k)
	err := s.update(ctx, func(txn *badgerdb.Txn) error {
		var doomed [][]byte
		err := scan(ctx, txn, string(prefix), func(item *badgerdb.Item) error {
			doomed = append(doomed, item.KeyCopy(nil))
			return nil
		})
		if err != nil {
			return err
		}
		doomed = append(doomed, keys.JobSeq(k))
		for _, key := range doomed {
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
func bumpCounter(txn *badgerdb.Txn, key []byte) (uint64, error) {
	var n uint64
	item, err := txn.Get(key)
	switch {
	case errors.Is(err, badgerdb.ErrKeyNotFound):
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
