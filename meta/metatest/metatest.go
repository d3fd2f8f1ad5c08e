// Package metatest is the conformance suite for meta.Store backends. Every
// backend (Badger, etcd) runs it from its own tests:
//
//	func TestConformance(t *testing.T) {
//		metatest.Run(t, func(t *testing.T) meta.Store { return openMyStore(t) })
//	}
//
// The suite checks the promises callers rely on, not how a backend keeps
// them: compare-and-set on revisions, the sentinel errors, the order of
// lists, and that every (tenant, thread) pair, however hostile, names its
// own record.
package metatest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"warren/meta"
)

// Run runs the suite. open is called once per subtest and must return a
// new, empty store. Run closes that store when the subtest ends; Close is
// idempotent, so open may register a cleanup of its own as well.
func Run(t *testing.T, open func(t *testing.T) meta.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s meta.Store)
	}{
		{"CreateGet", testCreateGet},
		{"CreateExisting", testCreateExisting},
		{"GetMissing", testGetMissing},
		{"Update", testUpdate},
		{"UpdateRefused", testUpdateRefused},
		{"Delete", testDelete},
		{"DeleteRefused", testDeleteRefused},
		{"RecreateGetsNewRevision", testRecreate},
		{"RevisionsIncrease", testRevisionsIncrease},
		{"ListEmpty", testListEmpty},
		{"ListOrder", testListOrder},
		{"ListPages", testListPages},
		{"ListPagesOfTenant", testListPagesOfTenant},
		{"ListPageAfter", testListPageAfter},
		{"ListPagesWhileCreating", testListPagesWhileCreating},
		{"HostileKeys", testHostileKeys},
		{"ConcurrentCreate", testConcurrentCreate},
		{"ConcurrentUpdate", testConcurrentUpdate},
		{"ConcurrentDelete", testConcurrentDelete},
		{"InspectionMounts", testInspectionMounts},
		{"CanceledContext", testCanceledContext},
		{"JobNumbers", testJobNumbers},
		{"JobRecords", testJobRecords},
		{"ConcurrentJobNumbers", testConcurrentJobNumbers},
		{"HostsAndPins", testHostsAndPins},
		{"PinRestartedHost", testPinRestartedHost},
		{"ConcurrentPins", testConcurrentPins},
		{"HistoryCreateGet", testHistoryCreateGet},
		{"HistoryCreateExisting", testHistoryCreateExisting},
		{"HistoryGetMissing", testHistoryGetMissing},
		{"HistoryReplace", testHistoryReplace},
		{"HistoryDelete", testHistoryDelete},
		{"HistoryRecreateGetsNewRevision", testHistoryRecreate},
		{"ListHistories", testListHistories},
		{"HistoryTooLarge", testHistoryTooLarge},
		{"HistoryRefusesTextJSONWouldRewrite", testHistoryRefusesTextJSONWouldRewrite},
		{"ConcurrentHistory", testConcurrentHistory},
		{"Claims", testClaims},
		{"Closed", testClosed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			tt.fn(t, s)
		})
	}
}

// boundAt is a fixed time with nanoseconds, so a backend that loses
// precision is caught.
var boundAt = time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC)

// Binding returns a bound binding of thread in tenant, on host-1, with a
// root and a mount path named after the thread: a record for a backend's
// own tests to write.
func Binding(tenant, thread string) meta.Binding {
	return meta.Binding{
		ThreadKey: meta.ThreadKey{Tenant: tenant, Thread: thread},
		Kind:      meta.KindHost,
		HostID:    "host-1",
		Root:      "/srv/warren/" + thread,
		MountPath: "/run/warren/" + thread,
		BoundAt:   time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC),
		State:     meta.StateBound,
	}
}

func binding(tenant, thread, root string) meta.Binding {
	return meta.Binding{
		ThreadKey: meta.ThreadKey{Tenant: tenant, Thread: thread},
		Kind:      meta.KindHost,
		HostID:    "host-1",
		Root:      root,
		MountPath: "/run/warren/mnt" + root,
		BoundAt:   boundAt,
		State:     meta.StateBound,
		Settings: meta.Settings{
			Network: "host", MemoryBytes: 1 << 30, MaxProcs: 64, MaxJobs: 3, CPUMillis: 250,
			Env: map[string]string{"NODE_ENV": "test", "EMPTY": ""},
		},
	}
}

// checkBinding reports every field of got that differs from want, except
// Revision, which the store assigns.
func checkBinding(t testing.TB, what string, got, want meta.Binding) {
	t.Helper()
	var diffs []string
	diff := func(field string, got, want any) {
		diffs = append(diffs, fmt.Sprintf("%s: got %q, want %q", field, got, want))
	}
	if got.ThreadKey != want.ThreadKey {
		diff("ThreadKey", got.ThreadKey, want.ThreadKey)
	}
	if got.Kind != want.Kind {
		diff("Kind", got.Kind, want.Kind)
	}
	if got.HostID != want.HostID {
		diff("HostID", got.HostID, want.HostID)
	}
	if got.Root != want.Root {
		diff("Root", got.Root, want.Root)
	}
	if got.MountPath != want.MountPath {
		diff("MountPath", got.MountPath, want.MountPath)
	}
	if !got.BoundAt.Equal(want.BoundAt) {
		diff("BoundAt", got.BoundAt, want.BoundAt)
	}
	if got.State != want.State {
		diff("State", got.State, want.State)
	}
	if !got.ClosedAt.Equal(want.ClosedAt) {
		diff("ClosedAt", got.ClosedAt, want.ClosedAt)
	}
	if !reflect.DeepEqual(got.Settings, want.Settings) {
		diff("Settings", fmt.Sprintf("%+v", got.Settings), fmt.Sprintf("%+v", want.Settings))
	}
	if len(diffs) > 0 {
		t.Errorf("%s: %s", what, strings.Join(diffs, "; "))
	}
}

func mustCreate(t testing.TB, s meta.Store, b meta.Binding) meta.Binding {
	t.Helper()
	got, err := s.CreateBinding(t.Context(), b)
	if err != nil {
		t.Fatalf("CreateBinding(%q): %v", b.ThreadKey, err)
	}
	return got
}

func mustGet(t testing.TB, s meta.Store, k meta.ThreadKey) meta.Binding {
	t.Helper()
	got, err := s.GetBinding(t.Context(), k)
	if err != nil {
		t.Fatalf("GetBinding(%q): %v", k, err)
	}
	return got
}

func mustList(t testing.TB, s meta.Store) []meta.Binding {
	t.Helper()
	got, err := s.ListBindings(t.Context())
	if err != nil {
		t.Fatalf("ListBindings: %v", err)
	}
	return got
}

func testCreateGet(t *testing.T, s meta.Store) {
	want := binding("acme", "t-1", "/srv/acme/t-1")
	want.Revision = 12345 // the store assigns revisions; this one is ignored
	created := mustCreate(t, s, want)
	if created.Revision == 0 {
		t.Fatalf("CreateBinding: got revision 0, want non-zero")
	}
	checkBinding(t, "CreateBinding result", created, want)

	got := mustGet(t, s, want.ThreadKey)
	checkBinding(t, "GetBinding", got, want)
	if got.Revision != created.Revision {
		t.Errorf("GetBinding: got revision %d, want %d (from create)", got.Revision, created.Revision)
	}

	// Every field round-trips, the optional ones included.
	full := binding("acme", "t-2", "/srv/acme/t-2")
	full.State = meta.StateClosed
	full.ClosedAt = boundAt.Add(time.Hour + time.Nanosecond)
	mustCreate(t, s, full)
	checkBinding(t, "GetBinding of a closed binding", mustGet(t, s, full.ThreadKey), full)

	// A delete under way is a state like the others: recorded before the
	// delete removes anything, read back by a restart that finishes it.
	deleting := mustCreate(t, s, binding("acme", "t-3", "/srv/acme/t-3"))
	deleting.State = meta.StateDeleting
	deleting, err := s.UpdateBinding(t.Context(), deleting)
	if err != nil {
		t.Fatalf("UpdateBinding to deleting: %v", err)
	}
	checkBinding(t, "GetBinding of a binding being deleted", mustGet(t, s, deleting.ThreadKey), deleting)
	all, err := s.ListBindings(t.Context())
	if err != nil {
		t.Fatalf("ListBindings: %v", err)
	}
	found := false
	for _, b := range all {
		if b.ThreadKey == deleting.ThreadKey {
			found = true
			checkBinding(t, "ListBindings of a binding being deleted", b, deleting)
		}
	}
	if !found {
		t.Errorf("ListBindings: the binding being deleted is missing")
	}
}

func testCreateExisting(t *testing.T, s meta.Store) {
	first := mustCreate(t, s, binding("acme", "t-1", "/first"))
	_, err := s.CreateBinding(t.Context(), binding("acme", "t-1", "/second"))
	if !errors.Is(err, meta.ErrExists) {
		t.Fatalf("second CreateBinding: got error %v, want ErrExists", err)
	}
	got := mustGet(t, s, first.ThreadKey)
	checkBinding(t, "GetBinding after refused create", got, first)
	if got.Revision != first.Revision {
		t.Errorf("GetBinding after refused create: got revision %d, want %d", got.Revision, first.Revision)
	}
}

func testGetMissing(t *testing.T, s meta.Store) {
	mustCreate(t, s, binding("acme", "t-1", "/r"))
	for _, k := range []meta.ThreadKey{
		{Tenant: "acme", Thread: "t-2"},
		{Tenant: "other", Thread: "t-1"},
		{Tenant: "acme", Thread: ""},
		{Tenant: "", Thread: ""},
	} {
		t.Run(fmt.Sprintf("%q", k), func(t *testing.T) {
			_, err := s.GetBinding(t.Context(), k)
			if !errors.Is(err, meta.ErrNotFound) {
				t.Errorf("GetBinding(%q): got error %v, want ErrNotFound", k, err)
			}
		})
	}
}

func testUpdate(t *testing.T, s meta.Store) {
	b := mustCreate(t, s, binding("acme", "t-1", "/r"))
	b.State = meta.StateClosed
	b.ClosedAt = boundAt.Add(time.Minute)
	b.HostID = "host-2"
	updated, err := s.UpdateBinding(t.Context(), b)
	if err != nil {
		t.Fatalf("UpdateBinding: %v", err)
	}
	if updated.Revision <= b.Revision {
		t.Errorf("UpdateBinding: got revision %d, want more than %d", updated.Revision, b.Revision)
	}
	checkBinding(t, "UpdateBinding result", updated, b)
	got := mustGet(t, s, b.ThreadKey)
	checkBinding(t, "GetBinding after update", got, b)
	if got.Revision != updated.Revision {
		t.Errorf("GetBinding after update: got revision %d, want %d", got.Revision, updated.Revision)
	}
}

func testUpdateRefused(t *testing.T, s meta.Store) {
	old := mustCreate(t, s, binding("acme", "t-1", "/r"))
	cur := old
	cur.Root = "/r2"
	cur, err := s.UpdateBinding(t.Context(), cur)
	if err != nil {
		t.Fatalf("UpdateBinding: %v", err)
	}

	tests := []struct {
		name    string
		key     meta.ThreadKey
		rev     uint64
		wantErr error
	}{
		{"stale revision", old.ThreadKey, old.Revision, meta.ErrConflict},
		{"zero revision", old.ThreadKey, 0, meta.ErrConflict},
		{"future revision", old.ThreadKey, cur.Revision + 1000, meta.ErrConflict},
		{"missing record", meta.ThreadKey{Tenant: "acme", Thread: "t-9"}, cur.Revision, meta.ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := binding(tt.key.Tenant, tt.key.Thread, "/refused")
			b.Revision = tt.rev
			_, err := s.UpdateBinding(t.Context(), b)
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("UpdateBinding(revision %d): got error %v, want %v", tt.rev, err, tt.wantErr)
			}
		})
	}
	got := mustGet(t, s, cur.ThreadKey)
	checkBinding(t, "GetBinding after refused updates", got, cur)
	if got.Revision != cur.Revision {
		t.Errorf("GetBinding after refused updates: got revision %d, want %d", got.Revision, cur.Revision)
	}
}

func testDelete(t *testing.T, s meta.Store) {
	b := mustCreate(t, s, binding("acme", "t-1", "/r"))
	keep := mustCreate(t, s, binding("acme", "t-2", "/r2"))
	if err := s.DeleteBinding(t.Context(), b.ThreadKey, b.Revision); err != nil {
		t.Fatalf("DeleteBinding: %v", err)
	}
	if _, err := s.GetBinding(t.Context(), b.ThreadKey); !errors.Is(err, meta.ErrNotFound) {
		t.Errorf("GetBinding after delete: got error %v, want ErrNotFound", err)
	}
	if err := s.DeleteBinding(t.Context(), b.ThreadKey, b.Revision); !errors.Is(err, meta.ErrNotFound) {
		t.Errorf("second DeleteBinding: got error %v, want ErrNotFound", err)
	}
	checkBinding(t, "GetBinding of the other thread", mustGet(t, s, keep.ThreadKey), keep)
}

func testDeleteRefused(t *testing.T, s meta.Store) {
	old := mustCreate(t, s, binding("acme", "t-1", "/r"))
	cur, err := s.UpdateBinding(t.Context(), old)
	if err != nil {
		t.Fatalf("UpdateBinding: %v", err)
	}
	for _, tt := range []struct {
		name string
		rev  uint64
	}{
		{"stale revision", old.Revision},
		{"zero revision", 0},
		{"future revision", cur.Revision + 1000},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := s.DeleteBinding(t.Context(), cur.ThreadKey, tt.rev)
			if !errors.Is(err, meta.ErrConflict) {
				t.Errorf("DeleteBinding(revision %d): got error %v, want ErrConflict", tt.rev, err)
			}
		})
	}
	if got := mustGet(t, s, cur.ThreadKey); got.Revision != cur.Revision {
		t.Errorf("GetBinding after refused deletes: got revision %d, want %d", got.Revision, cur.Revision)
	}
}

// testRecreate checks that a revision is never handed out twice: a caller
// holding a revision from before a delete must not be able to write the
// record that replaced it.
func testRecreate(t *testing.T, s meta.Store) {
	first := mustCreate(t, s, binding("acme", "t-1", "/first"))
	if err := s.DeleteBinding(t.Context(), first.ThreadKey, first.Revision); err != nil {
		t.Fatalf("DeleteBinding: %v", err)
	}
	second := mustCreate(t, s, binding("acme", "t-1", "/second"))
	if second.Revision <= first.Revision {
		t.Fatalf("recreated binding: got revision %d, want more than %d", second.Revision, first.Revision)
	}
	stale := first
	stale.Root = "/stale"
	if _, err := s.UpdateBinding(t.Context(), stale); !errors.Is(err, meta.ErrConflict) {
		t.Errorf("UpdateBinding with the revision of the deleted record: got error %v, want ErrConflict", err)
	}
	if err := s.DeleteBinding(t.Context(), first.ThreadKey, first.Revision); !errors.Is(err, meta.ErrConflict) {
		t.Errorf("DeleteBinding with the revision of the deleted record: got error %v, want ErrConflict", err)
	}
}

// testRevisionsIncrease checks that every write, to any record, returns a
// revision above every one before it.
func testRevisionsIncrease(t *testing.T, s meta.Store) {
	ctx := t.Context()
	a := mustCreate(t, s, binding("acme", "a", "/a"))
	last := a.Revision
	step := func(what string, rev uint64, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if rev <= last {
			t.Errorf("%s: got revision %d, want more than %d", what, rev, last)
		}
		last = rev
	}
	b, err := s.CreateBinding(ctx, binding("acme", "b", "/b"))
	step("create b", b.Revision, err)
	a, err = s.UpdateBinding(ctx, a)
	step("update a", a.Revision, err)
	m, err := s.PutInspectionMount(ctx, meta.InspectionMount{ThreadKey: a.ThreadKey, Path: "/mnt/a", MadeAt: boundAt})
	step("put inspection mount", m.Revision, err)
	b, err = s.UpdateBinding(ctx, b)
	step("update b", b.Revision, err)
	h, err := s.PutHistory(ctx, history(a.ThreadKey))
	step("create history", h.Revision, err)
	h, err = s.PutHistory(ctx, h)
	step("replace history", h.Revision, err)
	for i := range 10 {
		a, err = s.UpdateBinding(ctx, a)
		step(fmt.Sprintf("update a #%d", i), a.Revision, err)
	}
}

func testListEmpty(t *testing.T, s meta.Store) {
	if got := mustList(t, s); len(got) != 0 {
		t.Errorf("ListBindings of an empty store: got %d bindings, want 0", len(got))
	}
	mounts, err := s.ListInspectionMounts(t.Context())
	if err != nil {
		t.Fatalf("ListInspectionMounts: %v", err)
	}
	if len(mounts) != 0 {
		t.Errorf("ListInspectionMounts of an empty store: got %d mounts, want 0", len(mounts))
	}
}

// compareKeys orders thread keys by tenant, then thread, as Go compares
// strings (byte by byte).
func compareKeys(a, b meta.ThreadKey) int {
	return cmp.Or(strings.Compare(a.Tenant, b.Tenant), strings.Compare(a.Thread, b.Thread))
}

func testListOrder(t *testing.T, s meta.Store) {
	// Each neighbour pair is a trap for some encoding: a separator that
	// sorts above id bytes, a length prefix, NUL handling.
	want := []meta.ThreadKey{
		{Tenant: "", Thread: ""},
		{Tenant: "", Thread: "z"},
		{Tenant: "a", Thread: ""},
		{Tenant: "a", Thread: "\x00"},
		{Tenant: "a", Thread: "b"},
		{Tenant: "a", Thread: "b/c"},
		{Tenant: "a", Thread: "bb"},
		{Tenant: "a\x00", Thread: ""},
		{Tenant: "a\x00b", Thread: "a"},
		{Tenant: "a!", Thread: "z"},
		{Tenant: "a/", Thread: "a"},
		{Tenant: "a/b", Thread: "a"},
		{Tenant: "aa", Thread: "a"},
		{Tenant: "b", Thread: "a"},
		{Tenant: "\xff", Thread: "a"},
	}
	if !slices.IsSortedFunc(want, compareKeys) {
		t.Fatalf("test table is not sorted")
	}
	// Insert in an order unrelated to the wanted one: odd places first,
	// then even places backwards.
	var order []int
	for i := 1; i < len(want); i += 2 {
		order = append(order, i)
	}
	for i := (len(want) - 1) &^ 1; i >= 0; i -= 2 {
		order = append(order, i)
	}
	for _, i := range order {
		mustCreate(t, s, binding(want[i].Tenant, want[i].Thread, fmt.Sprintf("/r/%d", i)))
	}
	got := mustList(t, s)
	gotKeys := make([]meta.ThreadKey, len(got))
	for i, b := range got {
		gotKeys[i] = b.ThreadKey
	}
	if !slices.Equal(gotKeys, want) {
		t.Errorf("ListBindings order:\ngot  %q\nwant %q", gotKeys, want)
	}
	for i, b := range got {
		if i < len(want) && b.ThreadKey == want[i] && b.Root != fmt.Sprintf("/r/%d", i) {
			t.Errorf("ListBindings[%d] (%q): got root %q, want %q", i, b.ThreadKey, b.Root, fmt.Sprintf("/r/%d", i))
		}
	}
}

// hostileKeys are ids a client may send. Every pair must name its own
// record.
func hostileKeys() []meta.ThreadKey {
	long := strings.Repeat("x", 300)
	return []meta.ThreadKey{
		{Tenant: "", Thread: ""},
		{Tenant: "", Thread: "t"},
		{Tenant: "t", Thread: ""},
		{Tenant: "a/b", Thread: "c"},
		{Tenant: "a", Thread: "b/c"},
		{Tenant: "a/b/c", Thread: ""},
		{Tenant: "a", Thread: "b"},
		{Tenant: "ab", Thread: ""},
		{Tenant: "", Thread: "ab"},
		{Tenant: "..", Thread: "t"},
		{Tenant: ".", Thread: "t"},
		{Tenant: "/", Thread: "t"},
		{Tenant: "t", Thread: ".."},
		{Tenant: "t", Thread: "."},
		{Tenant: "t", Thread: "/"},
		{Tenant: "t", Thread: "../t"},
		{Tenant: "../other-tenant", Thread: "t-1"},
		{Tenant: "other-tenant", Thread: "t-1"},
		{Tenant: "a\x00b", Thread: "c"},
		{Tenant: "a", Thread: "b\x00c"},
		{Tenant: "a\x00", Thread: "bc"},
		{Tenant: "\x00", Thread: ""},
		{Tenant: "", Thread: "\x00"},
		{Tenant: "\x00", Thread: "\x00"},
		{Tenant: "\x00\x01", Thread: ""},
		{Tenant: "\x00\xff", Thread: ""},
		{Tenant: "\x01", Thread: "\xff"},
		{Tenant: "\xff", Thread: ""},
		{Tenant: "\xfe", Thread: ""},
		{Tenant: "%2F", Thread: "t"},
		{Tenant: "t\n", Thread: "x"},
		{Tenant: "T", Thread: "t"},
		{Tenant: "t", Thread: "T"},
		{Tenant: "t", Thread: "t"},
		{Tenant: "T", Thread: "T"},
		{Tenant: long, Thread: "t"},
		{Tenant: long + "y", Thread: "t"},
		{Tenant: long, Thread: long},
		{Tenant: "t", Thread: long},
		{Tenant: strings.ToUpper(long), Thread: long},
		{Tenant: strings.Repeat("é", 150), Thread: "t"},
	}
}

func testHostileKeys(t *testing.T, s meta.Store) {
	keys := hostileKeys()
	root := func(i int) string { return fmt.Sprintf("/r/%d", i) }
	seen := make(map[meta.ThreadKey]bool)
	for _, k := range keys {
		if seen[k] {
			t.Fatalf("test table has %q twice", k)
		}
		seen[k] = true
	}

	created := make([]meta.Binding, len(keys))
	for i, k := range keys {
		created[i] = mustCreate(t, s, binding(k.Tenant, k.Thread, root(i)))
	}
	for i, k := range keys {
		got, err := s.GetBinding(t.Context(), k)
		if err != nil {
			t.Errorf("GetBinding(%q): %v", k, err)
			continue
		}
		checkBinding(t, fmt.Sprintf("GetBinding(%q)", k), got, binding(k.Tenant, k.Thread, root(i)))
	}

	want := slices.Clone(keys)
	slices.SortFunc(want, compareKeys)
	got := mustList(t, s)
	gotKeys := make([]meta.ThreadKey, len(got))
	for i, b := range got {
		gotKeys[i] = b.ThreadKey
		j := slices.Index(keys, b.ThreadKey)
		if j >= 0 && b.Root != root(j) {
			t.Errorf("ListBindings entry %q: got root %q, want %q", b.ThreadKey, b.Root, root(j))
		}
	}
	if !slices.Equal(gotKeys, want) {
		t.Errorf("ListBindings:\ngot  %q\nwant %q", gotKeys, want)
	}

	// Deleting one record leaves its neighbours, however alike, alone.
	for i := 0; i < len(keys); i += 2 {
		if err := s.DeleteBinding(t.Context(), keys[i], created[i].Revision); err != nil {
			t.Errorf("DeleteBinding(%q): %v", keys[i], err)
		}
	}
	for i, k := range keys {
		_, err := s.GetBinding(t.Context(), k)
		switch {
		case i%2 == 0 && !errors.Is(err, meta.ErrNotFound):
			t.Errorf("GetBinding(%q) after its delete: got error %v, want ErrNotFound", k, err)
		case i%2 == 1 && err != nil:
			t.Errorf("GetBinding(%q) after a neighbour's delete: %v", k, err)
		}
	}
	if got, want := len(mustList(t, s)), len(keys)/2; got != want {
		t.Errorf("ListBindings after deletes: got %d bindings, want %d", got, want)
	}
}

// concurrency is how many goroutines race in the concurrent tests, and
// rounds how many times they race.
const (
	concurrency = 8
	rounds      = 20
)

// race runs fn(i) for i in [0, concurrency) in goroutines released at once
// and returns their errors by i.
func race(fn func(i int) error) []error {
	errs := make([]error, concurrency)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range concurrency {
		wg.Go(func() {
			<-start
			errs[i] = fn(i)
		})
	}
	close(start)
	wg.Wait()
	return errs
}

// checkOneWinner checks that exactly one of errs is nil and every other
// matches loser; it returns the winner's index, or -1.
func checkOneWinner(t testing.TB, what string, errs []error, loser error) int {
	t.Helper()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Errorf("%s: goroutines %d and %d both won", what, winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, loser):
			t.Errorf("%s: goroutine %d: got error %v, want %v", what, i, err, loser)
		}
	}
	if winner < 0 {
		t.Errorf("%s: no goroutine won", what)
	}
	return winner
}

func testConcurrentCreate(t *testing.T, s meta.Store) {
	for r := range rounds {
		k := meta.ThreadKey{Tenant: "acme", Thread: fmt.Sprintf("t-%d", r)}
		results := make([]meta.Binding, concurrency)
		errs := race(func(i int) error {
			var err error
			results[i], err = s.CreateBinding(t.Context(), binding(k.Tenant, k.Thread, fmt.Sprintf("/r/%d", i)))
			return err
		})
		w := checkOneWinner(t, fmt.Sprintf("round %d CreateBinding", r), errs, meta.ErrExists)
		if w < 0 {
			continue
		}
		got := mustGet(t, s, k)
		checkBinding(t, fmt.Sprintf("round %d GetBinding", r), got, binding(k.Tenant, k.Thread, fmt.Sprintf("/r/%d", w)))
		if got.Revision != results[w].Revision {
			t.Errorf("round %d GetBinding: got revision %d, want the winner's %d", r, got.Revision, results[w].Revision)
		}
	}
}

func testConcurrentUpdate(t *testing.T, s meta.Store) {
	cur := mustCreate(t, s, binding("acme", "t-1", "/r"))
	for r := range rounds {
		results := make([]meta.Binding, concurrency)
		errs := race(func(i int) error {
			b := cur // every goroutine read the same revision
			b.Root = fmt.Sprintf("/r/%d/%d", r, i)
			var err error
			results[i], err = s.UpdateBinding(t.Context(), b)
			return err
		})
		w := checkOneWinner(t, fmt.Sprintf("round %d UpdateBinding", r), errs, meta.ErrConflict)
		got := mustGet(t, s, cur.ThreadKey)
		if w >= 0 {
			if want := fmt.Sprintf("/r/%d/%d", r, w); got.Root != want {
				t.Errorf("round %d GetBinding: got root %q, want the winner's %q", r, got.Root, want)
			}
			if got.Revision != results[w].Revision {
				t.Errorf("round %d GetBinding: got revision %d, want the winner's %d", r, got.Revision, results[w].Revision)
			}
		}
		if got.Revision <= cur.Revision {
			t.Fatalf("round %d: got revision %d, want more than %d", r, got.Revision, cur.Revision)
		}
		cur = got
	}
}

func testConcurrentDelete(t *testing.T, s meta.Store) {
	for r := range rounds {
		b := mustCreate(t, s, binding("acme", fmt.Sprintf("t-%d", r), "/r"))
		errs := race(func(int) error {
			return s.DeleteBinding(t.Context(), b.ThreadKey, b.Revision)
		})
		checkOneWinner(t, fmt.Sprintf("round %d DeleteBinding", r), errs, meta.ErrNotFound)
		if _, err := s.GetBinding(t.Context(), b.ThreadKey); !errors.Is(err, meta.ErrNotFound) {
			t.Errorf("round %d GetBinding after delete: got error %v, want ErrNotFound", r, err)
		}
	}
}

func testInspectionMounts(t *testing.T, s meta.Store) {
	ctx := t.Context()
	mounts := []meta.InspectionMount{
		{ThreadKey: meta.ThreadKey{Tenant: "acme", Thread: "t-1"}, Path: "/mnt/b", MadeAt: boundAt},
		{ThreadKey: meta.ThreadKey{Tenant: "acme", Thread: "t-2"}, Path: "/mnt/a", Writable: true, Owner: 65534, MadeAt: boundAt},
		{ThreadKey: meta.ThreadKey{Tenant: "a\x00/", Thread: "\xff"}, Path: "/mnt/a/x", MadeAt: boundAt},
		{ThreadKey: meta.ThreadKey{Tenant: "", Thread: ""}, Path: "/mnt/a-b", MadeAt: boundAt.Add(time.Nanosecond)},
	}
	for _, m := range mounts {
		got, err := s.PutInspectionMount(ctx, m)
		if err != nil {
			t.Fatalf("PutInspectionMount(%q): %v", m.Path, err)
		}
		if got.Revision == 0 {
			t.Errorf("PutInspectionMount(%q): got revision 0, want non-zero", m.Path)
		}
	}
	list := func() []meta.InspectionMount {
		t.Helper()
		got, err := s.ListInspectionMounts(ctx)
		if err != nil {
			t.Fatalf("ListInspectionMounts: %v", err)
		}
		return got
	}
	check := func(what string, want []meta.InspectionMount) {
		t.Helper()
		want = slices.Clone(want)
		slices.SortFunc(want, func(a, b meta.InspectionMount) int { return strings.Compare(a.Path, b.Path) })
		got := list()
		if len(got) != len(want) {
			t.Fatalf("%s: got %d mounts, want %d: %+v", what, len(got), len(want), got)
		}
		for i := range got {
			g, w := got[i], want[i]
			if g.Path != w.Path || g.ThreadKey != w.ThreadKey || g.Writable != w.Writable || !g.MadeAt.Equal(w.MadeAt) {
				t.Errorf("%s [%d]: got %q %q writable=%v %v, want %q %q writable=%v %v",
					what, i, g.Path, g.ThreadKey, g.Writable, g.MadeAt, w.Path, w.ThreadKey, w.Writable, w.MadeAt)
			}
			if g.Owner != w.Owner {
				t.Errorf("%s [%d]: got owner %d, want %d", what, i, g.Owner, w.Owner)
			}
			if g.Revision == 0 {
				t.Errorf("%s [%d]: got revision 0, want non-zero", what, i)
			}
		}
	}
	check("after puts", mounts)

	// A put on a known path replaces the record.
	before := list()
	replaced := mounts[1]
	replaced.Writable = false
	replaced.ThreadKey.Thread = "t-3"
	got, err := s.PutInspectionMount(ctx, replaced)
	if err != nil {
		t.Fatalf("PutInspectionMount(%q) again: %v", replaced.Path, err)
	}
	for _, b := range before {
		if got.Revision <= b.Revision {
			t.Errorf("replacing put: got revision %d, want more than %d (%q)", got.Revision, b.Revision, b.Path)
		}
	}
	mounts[1] = replaced
	check("after replacing put", mounts)

	if err := s.DeleteInspectionMount(ctx, "/mnt/a"); err != nil {
		t.Fatalf("DeleteInspectionMount: %v", err)
	}
	mounts = slices.Delete(mounts, 1, 2)
	check("after delete", mounts)
	if err := s.DeleteInspectionMount(ctx, "/mnt/a"); err != nil {
		t.Errorf("DeleteInspectionMount of a missing path: got error %v, want nil", err)
	}
	if err := s.DeleteInspectionMount(ctx, "/never"); err != nil {
		t.Errorf("DeleteInspectionMount of a path never put: got error %v, want nil", err)
	}
	check("after deletes of missing paths", mounts)

	// Mounts and bindings do not see each other.
	if got := mustList(t, s); len(got) != 0 {
		t.Errorf("ListBindings with only mounts stored: got %d bindings, want 0", len(got))
	}
}

func testCanceledContext(t *testing.T, s meta.Store) {
	kept := mustCreate(t, s, binding("acme", "kept", "/kept"))
	keptHistory := mustPutHistory(t, s, history(kept.ThreadKey))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	b := binding("acme", "t-1", "/r")
	calls := []struct {
		name string
		call func() error
	}{
		{"CreateBinding", func() error { _, err := s.CreateBinding(ctx, b); return err }},
		{"UpdateBinding", func() error { _, err := s.UpdateBinding(ctx, kept); return err }},
		{"GetBinding", func() error { _, err := s.GetBinding(ctx, kept.ThreadKey); return err }},
		{"ListBindings", func() error { _, err := s.ListBindings(ctx); return err }},
		{"ListBindingsPage", func() error { _, _, err := s.ListBindingsPage(ctx, nil, nil, 10); return err }},
		{"ListBindingsPage past the end", func() error {
			_, _, err := s.ListBindingsPage(ctx, &kept.Tenant, &meta.ThreadKey{Tenant: "\xff"}, 10)
			return err
		}},
		{"DeleteBinding", func() error { return s.DeleteBinding(ctx, kept.ThreadKey, kept.Revision) }},
		{"PutInspectionMount", func() error {
			_, err := s.PutInspectionMount(ctx, meta.InspectionMount{Path: "/mnt/x"})
			return err
		}},
		{"ListInspectionMounts", func() error { _, err := s.ListInspectionMounts(ctx); return err }},
		{"DeleteInspectionMount", func() error { return s.DeleteInspectionMount(ctx, "/mnt/x") }},
		{"GetHistory", func() error { _, err := s.GetHistory(ctx, kept.ThreadKey); return err }},
		{"PutHistory create", func() error { _, err := s.PutHistory(ctx, history(b.ThreadKey)); return err }},
		{"PutHistory replace", func() error { _, err := s.PutHistory(ctx, keptHistory); return err }},
		{"DeleteHistory", func() error { return s.DeleteHistory(ctx, kept.ThreadKey) }},
		{"ListHistories", func() error { _, err := s.ListHistories(ctx, kept.Tenant); return err }},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			if err := c.call(); !errors.Is(err, context.Canceled) {
				t.Errorf("%s with a canceled context: got error %v, want context.Canceled", c.name, err)
			}
		})
	}
	// Nothing was written.
	if _, err := s.GetBinding(t.Context(), b.ThreadKey); !errors.Is(err, meta.ErrNotFound) {
		t.Errorf("GetBinding of the canceled create: got error %v, want ErrNotFound", err)
	}
	if got := mustGet(t, s, kept.ThreadKey); got.Revision != kept.Revision {
		t.Errorf("GetBinding after canceled writes: got revision %d, want %d", got.Revision, kept.Revision)
	}
	if _, err := s.GetHistory(t.Context(), b.ThreadKey); !errors.Is(err, meta.ErrNotFound) {
		t.Errorf("GetHistory of the canceled create: got error %v, want ErrNotFound", err)
	}
	checkStoredHistory(t, s, "GetHistory after canceled writes", keptHistory)
}

func testClosed(t *testing.T, s meta.Store) {
	b := mustCreate(t, s, binding("acme", "t-1", "/r"))
	h := mustPutHistory(t, s, history(b.ThreadKey))
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: got error %v, want nil", err)
	}
	ctx := t.Context()
	calls := []struct {
		name string
		call func() error
	}{
		{"CreateBinding", func() error { _, err := s.CreateBinding(ctx, binding("acme", "t-2", "/r")); return err }},
		{"UpdateBinding", func() error { _, err := s.UpdateBinding(ctx, b); return err }},
		{"GetBinding", func() error { _, err := s.GetBinding(ctx, b.ThreadKey); return err }},
		{"ListBindings", func() error { _, err := s.ListBindings(ctx); return err }},
		{"ListBindingsPage", func() error { _, _, err := s.ListBindingsPage(ctx, nil, nil, 10); return err }},
		{"ListBindingsPage past the end", func() error {
			_, _, err := s.ListBindingsPage(ctx, &b.Tenant, &meta.ThreadKey{Tenant: "\xff"}, 10)
			return err
		}},
		{"DeleteBinding", func() error { return s.DeleteBinding(ctx, b.ThreadKey, b.Revision) }},
		{"PutInspectionMount", func() error {
			_, err := s.PutInspectionMount(ctx, meta.InspectionMount{Path: "/mnt/x"})
			return err
		}},
		{"ListInspectionMounts", func() error { _, err := s.ListInspectionMounts(ctx); return err }},
		{"DeleteInspectionMount", func() error { return s.DeleteInspectionMount(ctx, "/mnt/x") }},
		{"GetHistory", func() error { _, err := s.GetHistory(ctx, h.ThreadKey); return err }},
		{"PutHistory create", func() error {
			_, err := s.PutHistory(ctx, history(meta.ThreadKey{Tenant: "acme", Thread: "t-2"}))
			return err
		}},
		{"PutHistory replace", func() error { _, err := s.PutHistory(ctx, h); return err }},
		{"DeleteHistory", func() error { return s.DeleteHistory(ctx, h.ThreadKey) }},
		{"ListHistories", func() error { _, err := s.ListHistories(ctx, h.Tenant); return err }},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			if err := c.call(); !errors.Is(err, meta.ErrClosed) {
				t.Errorf("%s after Close: got error %v, want ErrClosed", c.name, err)
			}
		})
	}
}
