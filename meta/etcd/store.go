package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/namespace"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"warren/meta"
	"warren/meta/internal/keys"
)

var _ meta.Store = (*Store)(nil)

// defaultRequestTimeout bounds one request when the config sets none:
// longer than an election (about a second with etcd's defaults), shorter
// than a client would wait for an answer.
const defaultRequestTimeout = 3 * time.Second

// defaultDialTimeout bounds Open's first round trip when the config
// sets no DialTimeout.
const defaultDialTimeout = 5 * time.Second

// defaultListPage is how many records one range read of a list returns.
// Lists are read in pages so that no single response grows with the store
// (a gRPC message has a size limit on each side).
const defaultListPage = 500

// Config says how to reach the etcd cluster.
type Config struct {
	// Endpoints are the client URLs of the cluster's members
	// ("http://127.0.0.1:2379"); the client spreads calls over them and
	// moves off a member that stops answering.
	Endpoints []string
	// Prefix is put before every key of meta/internal/keys, so several gateways'
	// deployments or test runs can share one cluster. The prefixes of
	// stores that share a cluster must not be prefixes of one another
	// ("warren/" and "warren/test/" clash; "warren/prod/" and
	// "warren/test/" do not): a range read under one would see the
	// other's keys. End each with a "/".
	Prefix string
	// DialTimeout bounds Open's check that the cluster answers
	// (default 5s).
	DialTimeout time.Duration
	// RequestTimeout bounds each request to the cluster (default 3s), so
	// a call answers ErrUnavailable rather than hang while the cluster
	// elects a new leader.
	RequestTimeout time.Duration
	// Logger gets the etcd client's messages, named "etcd", one level
	// quieter than the client ranks its info and debug lines. Nil
	// discards them.
	Logger hclog.Logger
}

// Store is the meta.Store on an etcd cluster, for several gateways that share
// one view of the threads. Records are JSON values under the keys of
// meta/internal/keys, below Config.Prefix.
//
// A record's Revision is its etcd ModRevision: etcd gives every write
// transaction a revision above all earlier ones in the cluster and never
// reuses one, which is exactly what Binding.Revision promises, so no
// counter of our own is kept (unlike Badger's sys/rev). Every
// compare-and-set is one etcd transaction that compares the key's
// ModRevision, so two gateways racing on one record cannot both win.
//
// A write whose ctx ends, or whose store is closed, after it was sent may
// still have been applied, as with any request over a network: the caller
// reads the record again, and its revision tells.
//
// Create one with Open and call Close when finished.
type Store struct {
	// client is the connection to the cluster; it stays reachable here
	// for what needs more than the key space (leases, watches).
	client *clientv3.Client
	// kv is client's key space with cfg.Prefix put before every key and
	// taken off every key read back (etcd's own namespace wrapper, so
	// the prefixing of ranges, compares and transactions is etcd's code,
	// not ours).
	kv clientv3.KV
	// prefix is cfg.Prefix, for what goes to the client directly.
	prefix string

	// life ends when Close is called; every call's ctx ends with it.
	// The client's own shutdown would not stop a call in flight soon:
	// its retry loop takes a closing connection for a passing failure
	// and tries again, with back-off, for seconds.
	life    context.Context
	end     context.CancelFunc
	timeout time.Duration // RequestTimeout
	// listPage is how many records one range read of a list returns
	// (defaultListPage; tests make it small, so their lists cross pages).
	listPage  int64
	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

// Open connects to the cluster in cfg and checks that it answers (a
// linearizable read, so a quorum is there) within cfg.DialTimeout and ctx.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("meta: open etcd: no endpoints")
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = defaultDialTimeout
	}
	// The client logs with zap, by default as JSON on stderr; here its
	// lines go to hclog like every other line of warren's, or nowhere.
	zl := zap.NewNop()
	if cfg.Logger != nil {
		zl = zap.New(zapHclog{l: cfg.Logger.Named("etcd")})
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("meta: open etcd %v: %w", cfg.Endpoints, err)
	}
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   slices.Clone(cfg.Endpoints),
		DialTimeout: cfg.DialTimeout,
		// Keepalive pings find a member that vanished without closing
		// its connections (a host that lost power, a partition); the
		// client then moves to another. etcd refuses pings more often
		// than every 5s by default, so 10s stays clear of that.
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		Logger:               zl,
	})
	if err != nil {
		return nil, fmt.Errorf("meta: open etcd %v: %w", cfg.Endpoints, err)
	}
	life, end := context.WithCancel(context.Background())
	s := &Store{
		client:   client,
		kv:       namespace.NewKV(client.KV, cfg.Prefix),
		prefix:   cfg.Prefix,
		life:     life,
		end:      end,
		timeout:  cfg.RequestTimeout,
		listPage: defaultListPage,
	}
	if s.timeout <= 0 {
		s.timeout = defaultRequestTimeout
	}
	// Making a client does not connect; one read shows the cluster is
	// there, so a wrong address fails here rather than at the first
	// binding.
	pingCtx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	err = s.call(pingCtx, func(ctx context.Context) error {
		_, err := s.kv.Get(ctx, keys.BindingPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err
	})
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("meta: open etcd %v: %w", cfg.Endpoints, err)
	}
	return s, nil
}

// Close closes the client; calls in flight fail with meta.ErrClosed. Calling
// it again does nothing; other calls after Close return meta.ErrClosed.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.end()
		if err := s.client.Close(); err != nil && !errors.Is(err, context.Canceled) {
			s.closeErr = fmt.Errorf("meta: close etcd: %w", err)
		}
	})
	return s.closeErr
}

// CreateBinding implements meta.Store.
func (s *Store) CreateBinding(ctx context.Context, b meta.Binding) (meta.Binding, error) {
	rev, err := s.createBinding(ctx, b)
	if err != nil {
		return meta.Binding{}, fmt.Errorf("meta: create binding %q/%q: %w", b.Tenant, b.Thread, err)
	}
	b.Revision = rev
	return b, nil
}

func (s *Store) createBinding(ctx context.Context, b meta.Binding) (uint64, error) {
	if err := keys.CheckText(b); err != nil {
		return 0, err
	}
	b.Revision = 0 // the stored value holds none; see encode
	return s.create(ctx, string(keys.Binding(b.ThreadKey)), b)
}

// UpdateBinding implements meta.Store.
func (s *Store) UpdateBinding(ctx context.Context, b meta.Binding) (meta.Binding, error) {
	rev, err := s.updateBinding(ctx, b)
	if err != nil {
		return meta.Binding{}, fmt.Errorf("meta: update binding %q/%q: %w", b.Tenant, b.Thread, err)
	}
	b.Revision = rev
	return b, nil
}

func (s *Store) updateBinding(ctx context.Context, b meta.Binding) (uint64, error) {
	if err := keys.CheckText(b); err != nil {
		return 0, err
	}
	want := b.Revision
	b.Revision = 0
	val, err := encode(b)
	if err != nil {
		return 0, err
	}
	key := string(keys.Binding(b.ThreadKey))
	return s.compareAndSet(ctx, key, want, clientv3.OpPut(key, val))
}

// GetBinding implements meta.Store.
func (s *Store) GetBinding(ctx context.Context, k meta.ThreadKey) (meta.Binding, error) {
	var b meta.Binding
	kv, err := s.get(ctx, string(keys.Binding(k)))
	if err == nil {
		err = decode(kv, &b)
	}
	if err != nil {
		return meta.Binding{}, fmt.Errorf("meta: get binding %q/%q: %w", k.Tenant, k.Thread, err)
	}
	// The key is the identity; JSON cannot carry ids that are not UTF-8.
	b.ThreadKey = k
	return b, nil
}

// ListBindings implements meta.Store. Range reads yield keys in byte order,
// which the key layout makes the promised one (tenant, then thread).
func (s *Store) ListBindings(ctx context.Context) ([]meta.Binding, error) {
	list := []meta.Binding{}
	err := s.scan(ctx, keys.BindingPrefix, func(kv *mvccpb.KeyValue) error {
		b, err := bindingOf(kv)
		list = append(list, b)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("meta: list bindings: %w", err)
	}
	return list, nil
}

// bindingOf decodes the binding record kv.
func bindingOf(kv *mvccpb.KeyValue) (meta.Binding, error) {
	k, err := keys.ParseBinding(kv.Key)
	if err != nil {
		return meta.Binding{}, err
	}
	var b meta.Binding
	if err := decode(kv, &b); err != nil {
		return meta.Binding{}, fmt.Errorf("binding %q/%q: %w", k.Tenant, k.Thread, err)
	}
	b.ThreadKey = k
	return b, nil
}

// ListBindingsPage implements meta.Store: one range read from the key
// after the cursor to the end of the prefix, limited to limit records
// (in reads of s.listPage when limit is larger), never a read of the
// whole prefix.
func (s *Store) ListBindingsPage(ctx context.Context, tenant *string, after *meta.ThreadKey, limit int) ([]meta.Binding, bool, error) {
	if limit <= 0 {
		return nil, false, fmt.Errorf("meta: list bindings page: limit %d is not positive", limit)
	}
	list := []meta.Binding{}
	prefix, from, ok := keys.BindingPage(tenant, after)
	if !ok {
		// Nothing to read, but a closed store or a canceled ctx still
		// answers as every call does.
		if err := s.call(ctx, func(context.Context) error { return nil }); err != nil {
			return nil, false, fmt.Errorf("meta: list bindings page: %w", err)
		}
		return list, false, nil
	}
	more, err := s.scanRange(ctx, string(from), clientv3.GetPrefixRangeEnd(string(prefix)), s.listPage, int64(limit), func(kv *mvccpb.KeyValue) error {
		b, err := bindingOf(kv)
		list = append(list, b)
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("meta: list bindings page: %w", err)
	}
	return list, more, nil
}

// DeleteBinding implements meta.Store.
func (s *Store) DeleteBinding(ctx context.Context, k meta.ThreadKey, rev uint64) error {
	key := string(keys.Binding(k))
	if _, err := s.compareAndSet(ctx, key, rev, clientv3.OpDelete(key)); err != nil {
		return fmt.Errorf("meta: delete binding %q/%q: %w", k.Tenant, k.Thread, err)
	}
	return nil
}

// PutInspectionMount implements meta.Store. The thread key travels in the
// value in the encoding of meta/internal/keys, as in Badger (keys.MountRecord).
func (s *Store) PutInspectionMount(ctx context.Context, m meta.InspectionMount) (meta.InspectionMount, error) {
	rev, err := s.putMount(ctx, m)
	if err != nil {
		return meta.InspectionMount{}, fmt.Errorf("meta: put inspection mount %q: %w", m.Path, err)
	}
	m.Revision = rev
	return m, nil
}

func (s *Store) putMount(ctx context.Context, m meta.InspectionMount) (uint64, error) {
	m.Revision = 0
	val, err := encode(keys.MountRecord{InspectionMount: m, RawThreadKey: keys.AppendThreadKey(nil, m.ThreadKey)})
	if err != nil {
		return 0, err
	}
	var resp *clientv3.PutResponse
	err = s.call(ctx, func(ctx context.Context) (err error) {
		resp, err = s.kv.Put(ctx, string(keys.Mount(m.Path)), val)
		return err
	})
	if err != nil {
		return 0, err
	}
	return uint64(resp.Header.Revision), nil
}

// ListInspectionMounts implements meta.Store.
func (s *Store) ListInspectionMounts(ctx context.Context) ([]meta.InspectionMount, error) {
	list := []meta.InspectionMount{}
	err := s.scan(ctx, keys.MountPrefix, func(kv *mvccpb.KeyValue) error {
		path, err := keys.ParseMount(kv.Key)
		if err != nil {
			return err
		}
		var rec keys.MountRecord
		if err := decode(kv, &rec); err != nil {
			return fmt.Errorf("inspection mount %q: %w", path, err)
		}
		k, err := keys.ParseThreadKey(rec.RawThreadKey)
		if err != nil {
			return fmt.Errorf("inspection mount %q: thread key: %w", path, err)
		}
		m := rec.InspectionMount
		m.Path, m.ThreadKey, m.Revision = path, k, uint64(kv.ModRevision)
		list = append(list, m)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("meta: list inspection mounts: %w", err)
	}
	return list, nil
}

// DeleteInspectionMount implements meta.Store.
func (s *Store) DeleteInspectionMount(ctx context.Context, path string) error {
	err := s.call(ctx, func(ctx context.Context) error {
		_, err := s.kv.Delete(ctx, string(keys.Mount(path)))
		return err
	})
	if err != nil {
		return fmt.Errorf("meta: delete inspection mount %q: %w", path, err)
	}
	return nil
}

// call runs rpc, one request to etcd, with a ctx that ends with ctx or
// with the store. It refuses to start on a closed store or a done ctx, so
// a canceled call never writes. If rpc fails it names why: the store was
// closed under it, or ctx ended (the client may report either as a gRPC
// error of its own, which errors.Is does not match with ErrClosed or
// ctx.Err()).
func (s *Store) call(ctx context.Context, rpc func(ctx context.Context) error) error {
	if s.closed.Load() {
		return meta.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	rpcCtx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	defer context.AfterFunc(s.life, cancel)()
	err := rpc(rpcCtx)
	switch {
	case err == nil:
		return nil
	case s.closed.Load():
		return fmt.Errorf("%w: %w", meta.ErrClosed, err)
	case ctx.Err() != nil && !errors.Is(err, ctx.Err()):
		return fmt.Errorf("%w: %w", ctx.Err(), err)
	case ctx.Err() == nil && (rpcCtx.Err() != nil || unavailable(err)):
		return fmt.Errorf("%w: %w", meta.ErrUnavailable, err)
	}
	return err
}

// unavailable says whether err means the cluster could not serve the
// request now (no leader, a leader lost mid-request, members out of
// reach), as opposed to a refusal of the request itself.
func unavailable(err error) bool {
	for _, e := range []error{rpctypes.ErrTimeout, rpctypes.ErrTimeoutDueToLeaderFail, rpctypes.ErrTimeoutDueToConnectionLost,
		rpctypes.ErrLeaderChanged, rpctypes.ErrNoLeader, rpctypes.ErrNotCapable, rpctypes.ErrTooManyRequests} {
		if errors.Is(err, e) {
			return true
		}
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

// create stores v under key if no record is there: one transaction that
// compares the key's CreateRevision with 0 (etcd's "key is absent"). It
// returns the new record's revision.
func (s *Store) create(ctx context.Context, key string, v any) (uint64, error) {
	val, err := encode(v)
	if err != nil {
		return 0, err
	}
	return s.createValue(ctx, key, val)
}

// createValue is create of a value already encoded.
func (s *Store) createValue(ctx context.Context, key, val string) (uint64, error) {
	var resp *clientv3.TxnResponse
	err := s.call(ctx, func(ctx context.Context) (err error) {
		resp, err = s.kv.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, val)).
			Commit()
		return err
	})
	if err != nil {
		return 0, err
	}
	if !resp.Succeeded {
		return 0, meta.ErrExists
	}
	// Every put of a transaction gets the transaction's revision, which
	// the response header carries.
	return uint64(resp.Header.Revision), nil
}

// compareAndSet runs op (a put or a delete of key) if the record under
// key is stored with revision want; it returns the revision of the write.
// Otherwise it reads the record in the same transaction to tell
// ErrNotFound from ErrConflict, so a refusal costs no second round trip.
func (s *Store) compareAndSet(ctx context.Context, key string, want uint64, op clientv3.Op) (uint64, error) {
	var resp *clientv3.TxnResponse
	err := s.call(ctx, func(ctx context.Context) (err error) {
		resp, err = s.kv.Txn(ctx).
			// An absent key has ModRevision 0, so the first compare
			// keeps a caller with revision 0 from "updating" a
			// missing record.
			If(clientv3.Compare(clientv3.CreateRevision(key), ">", 0),
				clientv3.Compare(clientv3.ModRevision(key), "=", etcdRevision(want))).
			Then(op).
			Else(clientv3.OpGet(key)).
			Commit()
		return err
	})
	if err != nil {
		return 0, err
	}
	if resp.Succeeded {
		return uint64(resp.Header.Revision), nil
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		return 0, meta.ErrNotFound
	}
	return 0, fmt.Errorf("%w: stored revision %d, caller has %d", meta.ErrConflict, kvs[0].ModRevision, want)
}

// etcdRevision converts a caller's revision for a compare. etcd revisions
// are positive int64s; a larger number can match no record, and -1 never
// does either.
func etcdRevision(rev uint64) int64 {
	if rev > math.MaxInt64 {
		return -1
	}
	return int64(rev)
}

// get reads the record under key, or ErrNotFound.
func (s *Store) get(ctx context.Context, key string) (*mvccpb.KeyValue, error) {
	var resp *clientv3.GetResponse
	err := s.call(ctx, func(ctx context.Context) (err error) {
		resp, err = s.kv.Get(ctx, key)
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 0 {
		return nil, meta.ErrNotFound
	}
	return resp.Kvs[0], nil
}

// scan calls fn for each record whose key starts with prefix, in key
// order. It reads in pages of s.listPage; every page after the first reads
// at the first one's revision, so the list is one snapshot, as a single
// read would be. (A compaction past that revision between two pages fails
// the list with etcd's "compacted" error rather than mixing two states.)
func (s *Store) scan(ctx context.Context, prefix string, fn func(*mvccpb.KeyValue) error) error {
	return s.scanPages(ctx, prefix, s.listPage, fn)
}

// scanPages is scan in pages of page records, for records larger than
// most (a page of s.listPage of them would be too large a response).
func (s *Store) scanPages(ctx context.Context, prefix string, page int64, fn func(*mvccpb.KeyValue) error) error {
	_, err := s.scanRange(ctx, prefix, clientv3.GetPrefixRangeEnd(prefix), page, 0, fn)
	return err
}

// scanRange calls fn for each record whose key is in [from, end), in key
// order, in range reads of at most page records at one revision (as scan).
// When max is positive it stops after max records, each read asking for
// no more than are left; more then says whether the range holds records
// after the last one read (etcd's own More of the last read).
func (s *Store) scanRange(ctx context.Context, from, end string, page, max int64, fn func(*mvccpb.KeyValue) error) (more bool, err error) {
	var rev, read int64
	for {
		n := page
		if max > 0 {
			n = min(page, max-read)
		}
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(n)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		var resp *clientv3.GetResponse
		err := s.call(ctx, func(ctx context.Context) (err error) {
			resp, err = s.kv.Get(ctx, from, opts...)
			return err
		})
		if err != nil {
			return false, err
		}
		rev = resp.Header.Revision
		for _, kv := range resp.Kvs {
			if err := fn(kv); err != nil {
				return false, err
			}
		}
		read += int64(len(resp.Kvs))
		if !resp.More || len(resp.Kvs) == 0 {
			return false, nil
		}
		if max > 0 && read >= max {
			return true, nil
		}
		// The next page starts just after the last key read.
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// encode is the stored form of a record. Callers zero its Revision first:
// the revision of a record is its etcd ModRevision, which is known only
// once the write is done, so the value never holds it.
func encode(v any) (string, error) {
	val, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encode: %w", err)
	}
	return string(val), nil
}

// decode reads a record stored by encode into v and sets its Revision
// from the key's ModRevision.
func decode(kv *mvccpb.KeyValue, v any) error {
	if err := json.Unmarshal(kv.Value, v); err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	rev := uint64(kv.ModRevision)
	switch r := v.(type) {
	case *meta.Binding:
		r.Revision = rev
	case *meta.Job:
		r.Revision = rev
	case *keys.MountRecord:
		r.Revision = rev
	case *meta.History:
		r.Revision = rev
	case *meta.Claim:
		r.Revision = rev
	}
	return nil
}
