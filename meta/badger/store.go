package badger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	badgerdb "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
	"github.com/hashicorp/go-hclog"

	"warren/meta"
	"warren/meta/internal/keys"
)

var _ meta.Store = (*Store)(nil)

// conflictRetries is how many times a write transaction is tried when
// Badger reports a conflict between transactions. Writes are serialized
// (see Store.writeSem), so a conflict is not expected at all; the retry is
// a safety net, and it never turns into ErrConflict, which is reserved for
// a revision mismatch the caller must handle.
const conflictRetries = 4

// Store is the embedded meta.Store: one Badger database in a folder on the
// local disk. Records are JSON values under the keys of meta/internal/keys;
// revisions come from one counter stored beside them and bumped in the same
// transaction as the write, so a revision is never handed out twice, even
// across restarts or crashes.
//
// Every write is synced to disk before it returns: a binding that was
// acknowledged survives kill -9. On a nearly full disk writes fail with
// meta.ErrNoSpace and reads go on, instead of Badger dying of SIGBUS in its
// mmap'd files (space.go).
//
// Only one process may open a folder at a time (Badger locks it). Create
// one with Open and call Close when finished.
type Store struct {
	db  *badgerdb.DB // set at open, never changes
	dir string
	log hclog.Logger

	// writeSem (capacity 1) serializes write transactions. Every write
	// reads and bumps the revision counter, so two concurrent writes
	// would always conflict in Badger; taking turns up front is cheaper
	// than failing at commit and retrying, and a channel, unlike a mutex,
	// lets a waiting caller give up when its ctx is done. Badger's folder
	// lock makes this process the only writer, so the semaphore is the
	// whole story.
	writeSem chan struct{}

	// mu guards closed. Every operation holds it for reading while it
	// uses db, so Close (which holds it for writing) waits for them and
	// no operation ever touches a closed database.
	mu     sync.RWMutex
	closed bool
}

// Open opens (creating if needed) the store in dir. Badger's own
// messages go to logger, named "badger", one level quieter than Badger
// ranks them: its routine info lines are debug lines here. A nil logger
// discards them.
//
// The options suit a long-lived daemon on a small machine: most records
// are a few hundred bytes, so memtables and value-log files are small.
// Values stay in the LSM tree, a history too (up to meta.MaxHistoryBytes;
// the value threshold is Badger's largest, 1 MiB): compaction drops the
// copies that rewrites replaced, whereas the value log, never garbage
// collected here, would keep them all. There is no block cache
// (compression is off, so none is needed; the OS page cache serves the
// tables).
func Open(ctx context.Context, dir string, logger hclog.Logger) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("meta: open badger in %s: %w", dir, err)
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	opts := badgerdb.DefaultOptions(dir).
		WithLogger(badgerLogger{logger.Named("badger")}).
		WithSyncWrites(true).
		WithMetricsEnabled(false).
		WithMemTableSize(8 << 20).
		WithNumMemtables(2).
		WithValueThreshold(1 << 20).
		WithValueLogFileSize(16 << 20).
		WithCompression(options.None).
		WithBlockCacheSize(0).
		WithIndexCacheSize(0).
		WithNumCompactors(2).
		WithNumGoroutines(2)
	s := &Store{dir: dir, log: logger, writeSem: make(chan struct{}, 1)}
	if err := s.prepareOpen(); err != nil {
		return nil, fmt.Errorf("meta: open badger in %s: %w", dir, err)
	}
	db, err := badgerdb.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("meta: open badger in %s: %w", dir, err)
	}
	// Opening replays the log and may take a while; a caller that gave up
	// meanwhile gets no half-owned database.
	if err := ctx.Err(); err != nil {
		if cerr := db.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		return nil, fmt.Errorf("meta: open badger in %s: %w", dir, err)
	}
	s.db = db
	return s, nil
}

// Close waits for the calls in flight, then closes the database. Calling
// it again does nothing; other calls after Close return meta.ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.roomToClose()
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("meta: close badger: %w", err)
	}
	return nil
}

// CreateBinding implements meta.Store.
func (s *Store) CreateBinding(ctx context.Context, b meta.Binding) (meta.Binding, error) {
	if err := keys.CheckText(b); err != nil {
		return meta.Binding{}, fmt.Errorf("meta: create binding %q/%q: %w", b.Tenant, b.Thread, err)
	}
	err := s.writeRecord(ctx, keys.Binding(b.ThreadKey), true, 0, func(rev uint64) any { b.Revision = rev; return b })
	if err != nil {
		return meta.Binding{}, fmt.Errorf("meta: create binding %q/%q: %w", b.Tenant, b.Thread, err)
	}
	return b, nil
}

// UpdateBinding implements meta.Store.
func (s *Store) UpdateBinding(ctx context.Context, b meta.Binding) (meta.Binding, error) {
	if err := keys.CheckText(b); err != nil {
		return meta.Binding{}, fmt.Errorf("meta: update binding %q/%q: %w", b.Tenant, b.Thread, err)
	}
	err := s.writeRecord(ctx, keys.Binding(b.ThreadKey), false, b.Revision, func(rev uint64) any { b.Revision = rev; return b })
	if err != nil {
		return meta.Binding{}, fmt.Errorf("meta: update binding %q/%q: %w", b.Tenant, b.Thread, err)
	}
	return b, nil
}

// GetBinding implements meta.Store.
func (s *Store) GetBinding(ctx context.Context, k meta.ThreadKey) (meta.Binding, error) {
	var b meta.Binding
	err := s.view(ctx, func(txn *badgerdb.Txn) error {
		item, err := txn.Get(keys.Binding(k))
		if errors.Is(err, badgerdb.ErrKeyNotFound) {
			return meta.ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		return getJSON(item, &b)
	})
	if err != nil {
		return meta.Binding{}, fmt.Errorf("meta: get binding %q/%q: %w", k.Tenant, k.Thread, err)
	}
	// The key is the identity; JSON cannot carry ids that are not UTF-8.
	b.ThreadKey = k
	return b, nil
}

// ListBindings implements meta.Store. The key layout makes Badger's own order
// the promised one (tenant, then thread).
func (s *Store) ListBindings(ctx context.Context) ([]meta.Binding, error) {
	list := []meta.Binding{}
	err := s.view(ctx, func(txn *badgerdb.Txn) error {
		return scan(ctx, txn, keys.BindingPrefix, func(item *badgerdb.Item) error {
			b, err := bindingOf(item)
			list = append(list, b)
			return err
		})
	})
	if err != nil {
		return nil, fmt.Errorf("meta: list bindings: %w", err)
	}
	return list, nil
}

// bindingOf decodes the binding record item.
func bindingOf(item *badgerdb.Item) (meta.Binding, error) {
	k, err := keys.ParseBinding(item.Key())
	if err != nil {
		return meta.Binding{}, err
	}
	var b meta.Binding
	if err := getJSON(item, &b); err != nil {
		return meta.Binding{}, fmt.Errorf("binding %q/%q: %w", k.Tenant, k.Thread, err)
	}
	b.ThreadKey = k
	return b, nil
}

// ListBindingsPage implements meta.Store: an iterator seeks to the first
// key after the cursor and stops after limit records, looking at the key
// of one more to say whether the page is the last.
func (s *Store) ListBindingsPage(ctx context.Context, tenant *string, after *meta.ThreadKey, limit int) ([]meta.Binding, bool, error) {
	if limit <= 0 {
		return nil, false, fmt.Errorf("meta: list bindings page: limit %d is not positive", limit)
	}
	list := []meta.Binding{}
	more := false
	prefix, from, ok := keys.BindingPage(tenant, after)
	err := s.view(ctx, func(txn *badgerdb.Txn) error {
		if !ok {
			return nil
		}
		opts := badgerdb.DefaultIteratorOptions
		opts.Prefix = prefix
		// Values are read one by one, for the records kept only: a
		// prefetch would read ahead past the page.
		opts.PrefetchValues = false
		it := txn.NewIterator(opts)
		defer it.Close()
		for it.Seek(from); it.Valid(); it.Next() {
			if len(list) == limit {
				more = true
				return nil
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			b, err := bindingOf(it.Item())
			if err != nil {
				return err
			}
			list = append(list, b)
		}
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("meta: list bindings page: %w", err)
	}
	return list, more, nil
}

// DeleteBinding implements meta.Store.
func (s *Store) DeleteBinding(ctx context.Context, k meta.ThreadKey, rev uint64) error {
	key := keys.Binding(k)
	err := s.update(ctx, func(txn *badgerdb.Txn) error {
		if err := checkRevision(txn, key, rev); err != nil {
			return err
		}
		if err := txn.Delete(key); err != nil {
			return fmt.Errorf("delete: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("meta: delete binding %q/%q: %w", k.Tenant, k.Thread, err)
	}
	return nil
}

// PutInspectionMount implements meta.Store.
func (s *Store) PutInspectionMount(ctx context.Context, m meta.InspectionMount) (meta.InspectionMount, error) {
	err := s.update(ctx, func(txn *badgerdb.Txn) error {
		rev, err := nextRevision(txn)
		if err != nil {
			return err
		}
		m.Revision = rev
		return setJSON(txn, keys.Mount(m.Path), keys.MountRecord{
			InspectionMount: m,
			RawThreadKey:    keys.AppendThreadKey(nil, m.ThreadKey),
		})
	})
	if err != nil {
		return meta.InspectionMount{}, fmt.Errorf("meta: put inspection mount %q: %w", m.Path, err)
	}
	return m, nil
}

// ListInspectionMounts implements meta.Store.
func (s *Store) ListInspectionMounts(ctx context.Context) ([]meta.InspectionMount, error) {
	list := []meta.InspectionMount{}
	err := s.view(ctx, func(txn *badgerdb.Txn) error {
		return scan(ctx, txn, keys.MountPrefix, func(item *badgerdb.Item) error {
			path, err := keys.ParseMount(item.Key())
			if err != nil {
				return err
			}
			var rec keys.MountRecord
			if err := getJSON(item, &rec); err != nil {
				return fmt.Errorf("inspection mount %q: %w", path, err)
			}
			k, err := keys.ParseThreadKey(rec.RawThreadKey)
			if err != nil {
				return fmt.Errorf("inspection mount %q: thread key: %w", path, err)
			}
			m := rec.InspectionMount
			m.Path, m.ThreadKey = path, k
			list = append(list, m)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("meta: list inspection mounts: %w", err)
	}
	return list, nil
}

// DeleteInspectionMount implements meta.Store.
func (s *Store) DeleteInspectionMount(ctx context.Context, path string) error {
	err := s.update(ctx, func(txn *badgerdb.Txn) error {
		if err := txn.Delete(keys.Mount(path)); err != nil {
			return fmt.Errorf("delete: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("meta: delete inspection mount %q: %w", path, err)
	}
	return nil
}

// writeRecord stores a record under key in one write transaction: if
// create, only where no record is (else ErrExists); otherwise only over
// the record stored with revision want (else ErrConflict or ErrNotFound).
// record is called with the record's new revision and returns the value
// to store; it may be called more than once (see update).
func (s *Store) writeRecord(ctx context.Context, key []byte, create bool, want uint64, record func(rev uint64) any) error {
	return s.update(ctx, func(txn *badgerdb.Txn) error {
		if create {
			switch _, err := txn.Get(key); {
			case err == nil:
				return meta.ErrExists
			case !errors.Is(err, badgerdb.ErrKeyNotFound):
				return fmt.Errorf("read: %w", err)
			}
		} else if err := checkRevision(txn, key, want); err != nil {
			return err
		}
		rev, err := nextRevision(txn)
		if err != nil {
			return err
		}
		return setJSON(txn, key, record(rev))
	})
}

// view runs fn in a read-only transaction, unless the store is closed or
// ctx is done.
func (s *Store) view(ctx context.Context, fn func(txn *badgerdb.Txn) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return meta.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.db.View(fn)
}

// update runs fn in a write transaction and commits it, once it is this
// caller's turn to write (see writeSem). fn may run more than once, so it
// must set everything it writes afresh on each run.
func (s *Store) update(ctx context.Context, fn func(txn *badgerdb.Txn) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return meta.ErrClosed
	}
	select {
	case s.writeSem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.writeSem }()
	// Checked with the turn held: no other write of this store runs
	// between the check and this one.
	if err := s.checkSpace(); err != nil {
		return err
	}

	for attempt := 1; ; attempt++ {
		// Checked before each attempt, never after a commit: a write
		// that committed is reported as done.
		if err := ctx.Err(); err != nil {
			return err
		}
		err := s.db.Update(fn)
		if !errors.Is(err, badgerdb.ErrConflict) || attempt == conflictRetries {
			return err
		}
	}
}

// nextRevision bumps the revision counter in txn and returns its new
// value. The first revision is 1, so zero never names a stored record.
func nextRevision(txn *badgerdb.Txn) (uint64, error) {
	rev, err := bumpCounter(txn, []byte(keys.Rev))
	if err != nil {
		return 0, fmt.Errorf("revision: %w", err)
	}
	return rev, nil
}

// checkRevision returns nil if the record under key is stored with
// revision want, ErrConflict if it has another, ErrNotFound if it is gone.
func checkRevision(txn *badgerdb.Txn, key []byte, want uint64) error {
	item, err := txn.Get(key)
	if errors.Is(err, badgerdb.ErrKeyNotFound) {
		return meta.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	var stored struct {
		Revision uint64 `json:"revision"`
	}
	if err := getJSON(item, &stored); err != nil {
		return err
	}
	if stored.Revision != want {
		return fmt.Errorf("%w: stored revision %d, caller has %d", meta.ErrConflict, stored.Revision, want)
	}
	return nil
}

// scan calls fn for each item whose key starts with prefix, in key order.
// Values are not prefetched: they live in the LSM tree (see Open), so
// prefetching would only copy them, up to a hundred at a time, and a
// history may be a megabyte.
func scan(ctx context.Context, txn *badgerdb.Txn, prefix string, fn func(*badgerdb.Item) error) error {
	opts := badgerdb.DefaultIteratorOptions
	opts.Prefix = []byte(prefix)
	opts.PrefetchValues = false
	it := txn.NewIterator(opts)
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(it.Item()); err != nil {
			return err
		}
	}
	return nil
}

func setJSON(txn *badgerdb.Txn, key []byte, v any) error {
	val, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	if err := txn.Set(key, val); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return nil
}

func getJSON(item *badgerdb.Item, v any) error {
	err := item.Value(func(val []byte) error {
		return json.Unmarshal(val, v)
	})
	if err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	return nil
}

// badgerLogger passes Badger's messages to hclog one level down: Badger
// reports routine work (tables opened, compactions) as info, which is
// noise in a daemon's log.
type badgerLogger struct{ l hclog.Logger }

var _ badgerdb.Logger = badgerLogger{}

func (b badgerLogger) Errorf(f string, v ...any) { b.l.Error(line(f, v)) }

func (b badgerLogger) Warningf(f string, v ...any) { b.l.Warn(line(f, v)) }

func (b badgerLogger) Infof(f string, v ...any) {
	if b.l.IsDebug() {
		b.l.Debug(line(f, v))
	}
}

func (b badgerLogger) Debugf(f string, v ...any) {
	if b.l.IsTrace() {
		b.l.Trace(line(f, v))
	}
}

// line formats a Badger message, which often ends in a newline of its own.
func line(f string, v []any) string {
	return strings.TrimSpace(fmt.Sprintf(f, v...))
}

// dropEmptyLogFiles removes the memtable and value log files (*.mem,
// *.vlog) of length zero in dir. Badger creates such a file and then sizes
// it; a process killed in between leaves an empty one, which Badger
// refuses to open ("while opening fid: N err: Create a new file", "Open
// existing file: ...vlog err: Create a new file"), so no later start
// would serve.
// An empty file holds no record: nothing is lost. It is done only while no
// process holds the folder's lock (Badger's flock), so never under a live
// store's feet: the caller holds the folder's lock (prepareOpen).
func dropEmptyLogFiles(dir string, log hclog.Logger) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read %s: %w", dir, err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() || !(strings.HasSuffix(e.Name(), ".mem") || strings.HasSuffix(e.Name(), ".vlog")) {
			continue
		}
		fi, err := e.Info()
		if err != nil || fi.Size() != 0 {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if err := os.Remove(p); err != nil {
			return fmt.Errorf("remove the empty log file %s: %w", p, err)
		}
		log.Warn("removed an empty log file left by a crash", "path", p)
	}
	return nil
}
