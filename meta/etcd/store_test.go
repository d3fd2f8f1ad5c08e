package etcd_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"warren/internal/testenv"
	"warren/meta"
	"warren/meta/etcd"
	"warren/meta/metatest"
)

// testPrefix returns a prefix no other store of the test run uses, so
// stores on one cluster start empty.
func testPrefix() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "warren-test/" + hex.EncodeToString(b) + "/"
}

// openEtcd opens a store on endpoints under prefix and closes it when the
// test ends.
func openEtcd(t testing.TB, endpoints []string, prefix string) *etcd.Store {
	t.Helper()
	s, err := etcd.Open(t.Context(), etcd.Config{Endpoints: endpoints, Prefix: prefix})
	if err != nil {
		t.Fatalf("etcd.Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// rawClient is a plain etcd client for looking behind the store.
func rawClient(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestEtcdConformance runs the suite on one single-member cluster; each
// subtest gets a store under a prefix of its own, so it starts empty.
// Lists are read three records a page, so the suite's lists cross pages.
func TestEtcdConformance(t *testing.T) {
	cluster := testenv.EtcdCluster(t, 1)
	metatest.Run(t, func(t *testing.T) meta.Store {
		s := openEtcd(t, cluster.Endpoints(), testPrefix())
		etcd.SetListPage(s, 3)
		return s
	})
}

// TestEtcdPrefix checks that the store keeps its keys under its prefix, in
// the layout of meta/internal/keys, and that stores under other prefixes don't see
// them.
func TestEtcdPrefix(t *testing.T) {
	ctx := t.Context()
	cluster := testenv.EtcdCluster(t, 1)
	prefix := testPrefix()
	a := openEtcd(t, cluster.Endpoints(), prefix)
	b := openEtcd(t, cluster.Endpoints(), testPrefix())
	k := meta.ThreadKey{Tenant: "a\x00/", Thread: "\xff"}
	bk := metatest.Binding("acme", "t-1")
	bk.ThreadKey = k
	created, err := a.CreateBinding(ctx, bk)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.NextJobSeq(ctx, k); err != nil {
		t.Fatal(err)
	}
	history, err := a.PutHistory(ctx, meta.History{ThreadKey: k, NextSeq: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.GetBinding(ctx, k); !errors.Is(err, meta.ErrNotFound) {
		t.Errorf("GetBinding under another prefix: got error %v, want ErrNotFound", err)
	}
	if list, err := b.ListBindings(ctx); err != nil || len(list) != 0 {
		t.Errorf("ListBindings under another prefix = %d bindings, %v; want none", len(list), err)
	}
	if seq, err := b.NextJobSeq(ctx, k); err != nil || seq != 1 {
		t.Errorf("NextJobSeq under another prefix = %d, %v; want 1", seq, err)
	}
	if list, err := b.ListHistories(ctx, k.Tenant); err != nil || len(list) != 0 {
		t.Errorf("ListHistories under another prefix = %d histories, %v; want none", len(list), err)
	}

	resp, err := rawClient(t, cluster.Endpoints()).Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		prefix + "binding/a\x00\xff/\x00\x01\xff\x00\x01",
		prefix + "history/a\x00\xff/\x00\x01\xff\x00\x01",
		prefix + "jobseq/a\x00\xff/\x00\x01\xff\x00\x01",
	}
	var got []string
	for _, kv := range resp.Kvs {
		got = append(got, string(kv.Key))
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("keys under the prefix:\ngot  %q\nwant %q", got, want)
	}
	if resp.Kvs[0].ModRevision != int64(created.Revision) {
		t.Errorf("binding's ModRevision %d, store gave revision %d", resp.Kvs[0].ModRevision, created.Revision)
	}
	// A record's revision is its ModRevision; the value holds zero.
	if len(resp.Kvs) > 1 {
		if kv := resp.Kvs[1]; kv.ModRevision != int64(history.Revision) || !strings.Contains(string(kv.Value), `"revision":0`) {
			t.Errorf("history's ModRevision %d and value %s; store gave revision %d, want it only as the ModRevision",
				kv.ModRevision, kv.Value, history.Revision)
		}
	}
}

// TestEtcdSurvivesMemberKill writes through a three-member cluster, kills
// its leader with SIGKILL, and reads and writes through the two left; then
// restarts the member and reads the newest write through it alone.
func TestEtcdSurvivesMemberKill(t *testing.T) {
	ctx := t.Context()
	cluster := testenv.EtcdCluster(t, 3)
	prefix := testPrefix()
	s := openEtcd(t, cluster.Endpoints(), prefix)
	b, err := s.CreateBinding(ctx, metatest.Binding("acme", "t-1"))
	if err != nil {
		t.Fatalf("CreateBinding: %v", err)
	}
	if _, err := s.NextJobSeq(ctx, b.ThreadKey); err != nil {
		t.Fatalf("NextJobSeq: %v", err)
	}

	// The leader's loss is the harder case: the others must elect a new
	// one before they take writes.
	leader := leaderIndex(t, cluster)
	cluster.Kill(t, leader)
	cluster.WaitHealthy(t)

	got, err := s.GetBinding(ctx, b.ThreadKey)
	if err != nil {
		t.Fatalf("GetBinding after killing member %d: %v", leader, err)
	}
	if got.Revision != b.Revision || got.Root != b.Root {
		t.Errorf("GetBinding after the kill: got revision %d root %q, want %d %q", got.Revision, got.Root, b.Revision, b.Root)
	}
	got.State = meta.StateClosed
	updated, err := s.UpdateBinding(ctx, got)
	if err != nil {
		t.Fatalf("UpdateBinding after killing member %d: %v", leader, err)
	}
	if _, err := s.UpdateBinding(ctx, got); !errors.Is(err, meta.ErrConflict) {
		t.Errorf("stale UpdateBinding after the kill: got error %v, want ErrConflict", err)
	}
	if _, err := s.CreateBinding(ctx, metatest.Binding("acme", "t-2")); err != nil {
		t.Errorf("CreateBinding after the kill: %v", err)
	}
	if seq, err := s.NextJobSeq(ctx, b.ThreadKey); err != nil || seq != 2 {
		t.Errorf("NextJobSeq after the kill = %d, %v; want 2", seq, err)
	}

	// The killed member comes back on its data and catches up.
	cluster.Restart(t, leader)
	only := openEtcd(t, []string{cluster.Endpoint(leader)}, prefix)
	got, err = only.GetBinding(ctx, b.ThreadKey)
	if err != nil {
		t.Fatalf("GetBinding through the restarted member: %v", err)
	}
	if got.Revision != updated.Revision || got.State != meta.StateClosed {
		t.Errorf("GetBinding through the restarted member: got revision %d state %q, want %d %q",
			got.Revision, got.State, updated.Revision, meta.StateClosed)
	}
	if list, err := only.ListBindings(ctx); err != nil || len(list) != 2 {
		t.Errorf("ListBindings through the restarted member = %d bindings, %v; want 2", len(list), err)
	}
}

// leaderIndex returns the index of the cluster's leader among its members.
func leaderIndex(t testing.TB, cluster *testenv.Etcd) int {
	t.Helper()
	c := rawClient(t, cluster.Endpoints())
	for i, ep := range cluster.Endpoints() {
		st, err := c.Status(t.Context(), ep)
		if err != nil {
			t.Fatalf("status of %s: %v", ep, err)
		}
		if st.Header.MemberId == st.Leader {
			return i
		}
	}
	t.Fatalf("no member of %v is the leader", cluster.Endpoints())
	return -1
}

// TestEtcdOpenUnreachable checks that Open fails, within its dial
// timeout, when no server answers.
func TestEtcdOpenUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	start := time.Now()
	s, err := etcd.Open(t.Context(), etcd.Config{
		Endpoints:   []string{"http://" + addr},
		Prefix:      testPrefix(),
		DialTimeout: 300 * time.Millisecond,
	})
	if err == nil {
		s.Close()
		t.Fatalf("etcd.Open of %s with nothing there: got nil error", addr)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("etcd.Open took %v to fail, want about its 300ms dial timeout", d)
	}
}

func TestEtcdOpenCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	s, err := etcd.Open(ctx, etcd.Config{Endpoints: []string{"http://127.0.0.1:1"}})
	if !errors.Is(err, context.Canceled) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("etcd.Open with a canceled context: got error %v, want context.Canceled", err)
	}
}

func TestEtcdOpenNoEndpoints(t *testing.T) {
	if _, err := etcd.Open(t.Context(), etcd.Config{}); err == nil {
		t.Fatal("etcd.Open without endpoints: got nil error")
	}
}

// TestEtcdCloseInFlight closes the store under a call that waits for a
// member that is gone; the call ends with ErrClosed.
func TestEtcdCloseInFlight(t *testing.T) {
	cluster := testenv.EtcdCluster(t, 1)
	s := openEtcd(t, cluster.Endpoints(), testPrefix())
	cluster.Kill(t, 0)
	errc := make(chan error, 1)
	go func() {
		_, err := s.GetBinding(context.Background(), meta.ThreadKey{Tenant: "acme", Thread: "t-1"})
		errc <- err
	}()
	time.Sleep(100 * time.Millisecond) // let the call start waiting
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, meta.ErrClosed) {
			t.Errorf("call in flight at Close: got error %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		// The client alone would retry for seconds (see Store.life).
		t.Fatal("call in flight at Close still waits 5s later")
	}
}
