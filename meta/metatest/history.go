package metatest

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"warren/meta"
)

// history returns a history of thread k with every field set: three
// checkpoints (one taken by an undo), one undone, and a restore under way.
func history(k meta.ThreadKey) meta.History {
	cp := func(seq uint64, parent string, auto bool) meta.Checkpoint {
		return meta.Checkpoint{
			ID: fmt.Sprintf("cp-%d", seq), Seq: seq, Label: fmt.Sprintf("turn %d", seq), Turn: int(seq), Run: "run-1",
			Tree: strings.Repeat(fmt.Sprint(seq), 64), Parent: parent, Auto: auto, HostID: "host-1",
			CreatedAt: boundAt.Add(time.Duration(seq) * time.Minute), Files: int64(seq) * 10, Bytes: int64(seq) << 20,
		}
	}
	return meta.History{
		ThreadKey:   k,
		NextSeq:     4,
		Checkpoints: []meta.Checkpoint{cp(1, "", false), cp(2, "cp-1", false), cp(3, "cp-2", true)},
		Head:        "cp-2",
		Redo:        []string{"cp-3"},
		Restoring: &meta.Restore{
			Op: "undo", To: "cp-1", Tree: strings.Repeat("1", 64), Head: "cp-1", Redo: []string{"cp-3", "cp-2"},
			HostID: "host-2", StartedAt: boundAt.Add(time.Hour + time.Nanosecond),
			From: strings.Repeat("2", 64), Failed: "write big.bin: disk quota exceeded",
		},
		FailedRestore: &meta.Restore{
			Op: "revert", To: "cp-3", Tree: strings.Repeat("3", 64), Head: "cp-3",
			StartedAt: boundAt.Add(30 * time.Minute), EndedAt: boundAt.Add(31*time.Minute + time.Nanosecond),
			From: strings.Repeat("2", 64), Failed: "snapshot: corrupt object",
		},
	}
}

// checkHistory reports every field of got that differs from want, except
// Revision, which the store assigns. A nil and an empty list are alike.
func checkHistory(t testing.TB, what string, got, want meta.History) {
	t.Helper()
	var diffs []string
	diff := func(field string, got, want any) {
		diffs = append(diffs, fmt.Sprintf("%s: got %+q, want %+q", field, got, want))
	}
	if got.ThreadKey != want.ThreadKey {
		diff("ThreadKey", got.ThreadKey, want.ThreadKey)
	}
	if got.NextSeq != want.NextSeq {
		diffs = append(diffs, fmt.Sprintf("NextSeq: got %d, want %d", got.NextSeq, want.NextSeq))
	}
	if len(got.Checkpoints) != len(want.Checkpoints) {
		diffs = append(diffs, fmt.Sprintf("Checkpoints: got %d, want %d", len(got.Checkpoints), len(want.Checkpoints)))
	} else {
		for i := range got.Checkpoints {
			g, w := got.Checkpoints[i], want.Checkpoints[i]
			if !g.CreatedAt.Equal(w.CreatedAt) {
				diff(fmt.Sprintf("Checkpoints[%d].CreatedAt", i), g.CreatedAt, w.CreatedAt)
			}
			g.CreatedAt, w.CreatedAt = time.Time{}, time.Time{}
			if g != w {
				diff(fmt.Sprintf("Checkpoints[%d]", i), g, w)
			}
		}
	}
	if got.Head != want.Head {
		diff("Head", got.Head, want.Head)
	}
	if !slices.Equal(got.Redo, want.Redo) {
		diff("Redo", got.Redo, want.Redo)
	}
	for _, r := range []struct {
		name string
		g, w *meta.Restore
	}{{"Restoring", got.Restoring, want.Restoring}, {"FailedRestore", got.FailedRestore, want.FailedRestore}} {
		switch g, w := r.g, r.w; {
		case (g == nil) != (w == nil):
			diff(r.name, g, w)
		case g != nil:
			if !g.StartedAt.Equal(w.StartedAt) {
				diff(r.name+".StartedAt", g.StartedAt, w.StartedAt)
			}
			if !g.EndedAt.Equal(w.EndedAt) {
				diff(r.name+".EndedAt", g.EndedAt, w.EndedAt)
			}
			if !slices.Equal(g.Redo, w.Redo) {
				diff(r.name+".Redo", g.Redo, w.Redo)
			}
			if g.Op != w.Op || g.To != w.To || g.Tree != w.Tree || g.Head != w.Head || g.HostID != w.HostID ||
				g.From != w.From || g.Failed != w.Failed {
				diff(r.name, *g, *w)
			}
		}
	}
	if len(diffs) > 0 {
		t.Errorf("%s: %s", what, strings.Join(diffs, "; "))
	}
}

func mustPutHistory(t testing.TB, s meta.Store, h meta.History) meta.History {
	t.Helper()
	got, err := s.PutHistory(t.Context(), h)
	if err != nil {
		t.Fatalf("PutHistory(%q, revision %d): %v", h.ThreadKey, h.Revision, err)
	}
	return got
}

func mustGetHistory(t testing.TB, s meta.Store, k meta.ThreadKey) meta.History {
	t.Helper()
	got, err := s.GetHistory(t.Context(), k)
	if err != nil {
		t.Fatalf("GetHistory(%q): %v", k, err)
	}
	return got
}

// checkStoredHistory checks that the history of want's thread is want,
// revision included.
func checkStoredHistory(t testing.TB, s meta.Store, what string, want meta.History) {
	t.Helper()
	got := mustGetHistory(t, s, want.ThreadKey)
	checkHistory(t, what, got, want)
	if got.Revision != want.Revision {
		t.Errorf("%s: got revision %d, want %d", what, got.Revision, want.Revision)
	}
}

func testHistoryCreateGet(t *testing.T, s meta.Store) {
	want := history(meta.ThreadKey{Tenant: "acme", Thread: "t-1"})
	created := mustPutHistory(t, s, want)
	if created.Revision == 0 {
		t.Fatalf("PutHistory: got revision 0, want non-zero")
	}
	checkHistory(t, "PutHistory result", created, want)
	checkStoredHistory(t, s, "GetHistory", created)

	// A history with no checkpoint left (all dropped, or none taken yet)
	// and nothing optional set round-trips too.
	empty := meta.History{ThreadKey: meta.ThreadKey{Tenant: "acme", Thread: "t-2"}, NextSeq: 9, Checkpoints: []meta.Checkpoint{}}
	empty = mustPutHistory(t, s, empty)
	got := mustGetHistory(t, s, empty.ThreadKey)
	checkHistory(t, "GetHistory of an empty history", got, empty)
	if got.Restoring != nil || len(got.Checkpoints) != 0 {
		t.Errorf("GetHistory of an empty history: got %d checkpoints, restoring %+v; want none", len(got.Checkpoints), got.Restoring)
	}

	// The history is a record of its own: the thread's binding neither
	// sees it nor hides it.
	if _, err := s.GetBinding(t.Context(), want.ThreadKey); !errors.Is(err, meta.ErrNotFound) {
		t.Errorf("GetBinding of a thread with only a history: got error %v, want ErrNotFound", err)
	}
	if got := mustList(t, s); len(got) != 0 {
		t.Errorf("ListBindings with only histories stored: got %d bindings, want 0", len(got))
	}
	b := mustCreate(t, s, binding("acme", "t-1", "/r"))
	if err := s.DeleteBinding(t.Context(), b.ThreadKey, b.Revision); err != nil {
		t.Fatalf("DeleteBinding: %v", err)
	}
	checkStoredHistory(t, s, "GetHistory after the thread's binding came and went", created)
}

func testHistoryCreateExisting(t *testing.T, s meta.Store) {
	first := mustPutHistory(t, s, history(meta.ThreadKey{Tenant: "acme", Thread: "t-1"}))
	second := history(first.ThreadKey)
	second.Head = "cp-1"
	if _, err := s.PutHistory(t.Context(), second); !errors.Is(err, meta.ErrExists) {
		t.Fatalf("second PutHistory with revision 0: got error %v, want ErrExists", err)
	}
	checkStoredHistory(t, s, "GetHistory after the refused create", first)
}

func testHistoryGetMissing(t *testing.T, s meta.Store) {
	mustPutHistory(t, s, history(meta.ThreadKey{Tenant: "acme", Thread: "t-1"}))
	mustCreate(t, s, binding("acme", "bound", "/r"))
	for _, k := range []meta.ThreadKey{
		{Tenant: "acme", Thread: "t-2"},
		{Tenant: "acme", Thread: "t-1\x00"},
		{Tenant: "other", Thread: "t-1"},
		{Tenant: "acme", Thread: "bound"},
		{Tenant: "", Thread: ""},
	} {
		t.Run(fmt.Sprintf("%q", k), func(t *testing.T) {
			if _, err := s.GetHistory(t.Context(), k); !errors.Is(err, meta.ErrNotFound) {
				t.Errorf("GetHistory(%q): got error %v, want ErrNotFound", k, err)
			}
		})
	}
}

func testHistoryReplace(t *testing.T, s meta.Store) {
	ctx := t.Context()
	old := mustPutHistory(t, s, history(meta.ThreadKey{Tenant: "acme", Thread: "t-1"}))

	// The restore finished: its journal goes, Head and Redo take its
	// values.
	cur := old
	cur.Head, cur.Redo, cur.Restoring = old.Restoring.Head, old.Restoring.Redo, nil
	cur.Checkpoints = append(slices.Clone(old.Checkpoints), meta.Checkpoint{
		ID: "cp-4", Seq: 4, Tree: strings.Repeat("4", 64), Parent: "cp-1", CreatedAt: boundAt.Add(2 * time.Hour),
	})
	cur.NextSeq = 5
	replaced, err := s.PutHistory(ctx, cur)
	if err != nil {
		t.Fatalf("PutHistory with the stored revision: %v", err)
	}
	if replaced.Revision <= old.Revision {
		t.Errorf("PutHistory: got revision %d, want more than %d", replaced.Revision, old.Revision)
	}
	checkHistory(t, "PutHistory result", replaced, cur)
	checkStoredHistory(t, s, "GetHistory after the replace", replaced)

	for _, tt := range []struct {
		name    string
		key     meta.ThreadKey
		rev     uint64
		wantErr error
	}{
		{"stale revision", old.ThreadKey, old.Revision, meta.ErrConflict},
		{"future revision", old.ThreadKey, replaced.Revision + 1000, meta.ErrConflict},
		{"missing history", meta.ThreadKey{Tenant: "acme", Thread: "t-9"}, replaced.Revision, meta.ErrNotFound},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := history(tt.key)
			h.Head = "refused"
			h.Revision = tt.rev
			if _, err := s.PutHistory(ctx, h); !errors.Is(err, tt.wantErr) {
				t.Errorf("PutHistory(revision %d): got error %v, want %v", tt.rev, err, tt.wantErr)
			}
		})
	}
	checkStoredHistory(t, s, "GetHistory after the refused replaces", replaced)
	if _, err := s.GetHistory(ctx, meta.ThreadKey{Tenant: "acme", Thread: "t-9"}); !errors.Is(err, meta.ErrNotFound) {
		t.Errorf("GetHistory after a refused replace of a missing history: got error %v, want ErrNotFound", err)
	}

	// Once deleted, the history is not replaced but missing.
	if err := s.DeleteHistory(ctx, replaced.ThreadKey); err != nil {
		t.Fatalf("DeleteHistory: %v", err)
	}
	if _, err := s.PutHistory(ctx, replaced); !errors.Is(err, meta.ErrNotFound) {
		t.Errorf("PutHistory of a deleted history: got error %v, want ErrNotFound", err)
	}
	if _, err := s.GetHistory(ctx, replaced.ThreadKey); !errors.Is(err, meta.ErrNotFound) {
		t.Errorf("GetHistory after a refused replace of a deleted history: got error %v, want ErrNotFound", err)
	}
}

func testHistoryDelete(t *testing.T, s meta.Store) {
	ctx := t.Context()
	h := mustPutHistory(t, s, history(meta.ThreadKey{Tenant: "acme", Thread: "t"}))
	// Near neighbours: another thread of the tenant whose id extends this
	// one, the same thread of a tenant whose id extends this one's, and
	// the thread's binding.
	keep := []meta.History{
		mustPutHistory(t, s, history(meta.ThreadKey{Tenant: "acme", Thread: "t\x00"})),
		mustPutHistory(t, s, history(meta.ThreadKey{Tenant: "acme\x00", Thread: "t"})),
	}
	b := mustCreate(t, s, binding("acme", "t", "/r"))
	for i := range 2 {
		if err := s.DeleteHistory(ctx, h.ThreadKey); err != nil {
			t.Fatalf("DeleteHistory #%d: %v", i+1, err)
		}
		if _, err := s.GetHistory(ctx, h.ThreadKey); !errors.Is(err, meta.ErrNotFound) {
			t.Errorf("GetHistory after DeleteHistory #%d: got error %v, want ErrNotFound", i+1, err)
		}
	}
	if err := s.DeleteHistory(ctx, meta.ThreadKey{Tenant: "never", Thread: "t"}); err != nil {
		t.Errorf("DeleteHistory of a history never stored: got error %v, want nil", err)
	}
	for _, k := range keep {
		checkStoredHistory(t, s, fmt.Sprintf("GetHistory(%q) after a neighbour's delete", k.ThreadKey), k)
	}
	if got := mustGet(t, s, b.ThreadKey); got.Revision != b.Revision {
		t.Errorf("GetBinding after DeleteHistory of its thread: got revision %d, want %d", got.Revision, b.Revision)
	}
}

// testHistoryRecreate: a revision read before a delete never matches the
// history created after it.
func testHistoryRecreate(t *testing.T, s meta.Store) {
	ctx := t.Context()
	first := mustPutHistory(t, s, history(meta.ThreadKey{Tenant: "acme", Thread: "t-1"}))
	if err := s.DeleteHistory(ctx, first.ThreadKey); err != nil {
		t.Fatalf("DeleteHistory: %v", err)
	}
	fresh := history(first.ThreadKey)
	fresh.Head = "cp-3"
	second := mustPutHistory(t, s, fresh)
	if second.Revision <= first.Revision {
		t.Fatalf("recreated history: got revision %d, want more than %d", second.Revision, first.Revision)
	}
	stale := first
	stale.Head = "stale"
	if _, err := s.PutHistory(ctx, stale); !errors.Is(err, meta.ErrConflict) {
		t.Errorf("PutHistory with the revision of the deleted history: got error %v, want ErrConflict", err)
	}
	checkStoredHistory(t, s, "GetHistory after the stale replace", second)
}

func testListHistories(t *testing.T, s meta.Store) {
	ctx := t.Context()
	// Every hostile pair gets a history that says which it is (NextSeq);
	// several tenants have more threads than a page of a list.
	keys := hostileKeys()
	for _, thread := range []string{"z", "y\x00", "x/..", "\xff\xfe", "", "w"} {
		keys = append(keys, meta.ThreadKey{Tenant: "a", Thread: thread}, meta.ThreadKey{Tenant: "a/b", Thread: thread})
	}
	for i, k := range keys {
		h := history(k)
		h.NextSeq = uint64(i + 1)
		mustPutHistory(t, s, h)
	}
	// A binding is not a history.
	mustCreate(t, s, binding("a", "bound", "/r"))

	tenants := []string{"never"}
	for _, k := range keys {
		if !slices.Contains(tenants, k.Tenant) {
			tenants = append(tenants, k.Tenant)
		}
	}
	for _, tenant := range tenants {
		t.Run(fmt.Sprintf("%q", tenant), func(t *testing.T) {
			var want []meta.ThreadKey
			for _, k := range keys {
				if k.Tenant == tenant {
					want = append(want, k)
				}
			}
			slices.SortFunc(want, compareKeys)
			list, err := s.ListHistories(ctx, tenant)
			if err != nil {
				t.Fatalf("ListHistories(%q): %v", tenant, err)
			}
			got := make([]meta.ThreadKey, len(list))
			for i, h := range list {
				got[i] = h.ThreadKey
				j := slices.Index(keys, h.ThreadKey)
				if j < 0 {
					continue
				}
				w := history(h.ThreadKey)
				w.NextSeq = uint64(j + 1)
				checkHistory(t, fmt.Sprintf("ListHistories(%q) entry %q", tenant, h.ThreadKey), h, w)
				if h.Revision == 0 {
					t.Errorf("ListHistories(%q) entry %q: got revision 0, want non-zero", tenant, h.ThreadKey)
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("ListHistories(%q):\ngot  %q\nwant %q", tenant, got, want)
			}
		})
	}

	// A listed revision is the stored one.
	k := meta.ThreadKey{Tenant: "a/b", Thread: "w"}
	h := mustGetHistory(t, s, k)
	h = mustPutHistory(t, s, h)
	list, err := s.ListHistories(ctx, k.Tenant)
	if err != nil {
		t.Fatalf("ListHistories(%q): %v", k.Tenant, err)
	}
	for _, l := range list {
		if l.ThreadKey == k && l.Revision != h.Revision {
			t.Errorf("ListHistories(%q) entry %q: got revision %d, want %d", k.Tenant, k, l.Revision, h.Revision)
		}
	}
}

// historyOfSize returns a history of thread k whose encoding, the one
// MaxHistoryBytes bounds, is exactly n bytes.
func historyOfSize(t testing.TB, k meta.ThreadKey, n int) meta.History {
	t.Helper()
	h := meta.History{ThreadKey: k, NextSeq: 2, Checkpoints: []meta.Checkpoint{{ID: "cp-1", Seq: 1, CreatedAt: boundAt}}}
	base, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	if n < len(base) {
		t.Fatalf("historyOfSize(%d): the smallest history is %d bytes", n, len(base))
	}
	h.Checkpoints[0].Tree = strings.Repeat("f", n-len(base))
	if enc, _ := json.Marshal(h); len(enc) != n {
		t.Fatalf("historyOfSize(%d): got %d bytes", n, len(enc))
	}
	return h
}

func testHistoryTooLarge(t *testing.T, s meta.Store) {
	ctx := t.Context()
	// The largest history is stored whole.
	k := meta.ThreadKey{Tenant: "acme", Thread: "largest"}
	largest := mustPutHistory(t, s, historyOfSize(t, k, meta.MaxHistoryBytes))
	checkStoredHistory(t, s, "GetHistory of a history of MaxHistoryBytes", largest)

	// One byte more is refused, as a create and as a replace.
	over := meta.ThreadKey{Tenant: "acme", Thread: "over"}
	if _, err := s.PutHistory(ctx, historyOfSize(t, over, meta.MaxHistoryBytes+1)); !errors.Is(err, meta.ErrTooLarge) {
		t.Errorf("PutHistory of MaxHistoryBytes+1 bytes: got error %v, want ErrTooLarge", err)
	}
	if _, err := s.GetHistory(ctx, over); !errors.Is(err, meta.ErrNotFound) {
		t.Errorf("GetHistory after a refused create: got error %v, want ErrNotFound", err)
	}
	grown := historyOfSize(t, k, meta.MaxHistoryBytes+1)
	grown.Revision = largest.Revision
	if _, err := s.PutHistory(ctx, grown); !errors.Is(err, meta.ErrTooLarge) {
		t.Errorf("PutHistory replacing with MaxHistoryBytes+1 bytes: got error %v, want ErrTooLarge", err)
	}
	checkStoredHistory(t, s, "GetHistory after a refused replace", largest)
	// Far over too: a thousand checkpoints with long labels.
	huge := history(over)
	for i := range 1000 {
		huge.Checkpoints = append(huge.Checkpoints, meta.Checkpoint{ID: fmt.Sprintf("cp-%d", i), Label: strings.Repeat("x", 2000)})
	}
	if _, err := s.PutHistory(ctx, huge); !errors.Is(err, meta.ErrTooLarge) {
		t.Errorf("PutHistory of a thousand long checkpoints: got error %v, want ErrTooLarge", err)
	}
	if list, err := s.ListHistories(ctx, "acme"); err != nil || len(list) != 1 || list[0].ThreadKey != k {
		t.Errorf("ListHistories after refused puts = %d histories, %v; want only %q", len(list), err, k)
	}
}

// testHistoryRefusesTextJSONWouldRewrite: a string JSON cannot carry (not
// UTF-8) would be read back changed, so it is refused, as a binding's are.
func testHistoryRefusesTextJSONWouldRewrite(t *testing.T, s meta.Store) {
	for _, tt := range []struct {
		name string
		edit func(*meta.History)
	}{
		{"label", func(h *meta.History) { h.Checkpoints[1].Label = "turn \xff" }},
		{"head", func(h *meta.History) { h.Head = "cp-\xfe" }},
		{"restore's redo", func(h *meta.History) { h.Restoring.Redo[0] = "\xc0" }},
		{"failed restore's reason", func(h *meta.History) { h.FailedRestore.Failed = "write \xff: disk quota exceeded" }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := history(meta.ThreadKey{Tenant: "acme", Thread: tt.name})
			tt.edit(&h)
			if _, err := s.PutHistory(t.Context(), h); err == nil {
				t.Fatalf("PutHistory with a %s that is not UTF-8: got nil error, want a refusal", tt.name)
			}
			if _, err := s.GetHistory(t.Context(), h.ThreadKey); !errors.Is(err, meta.ErrNotFound) {
				t.Errorf("GetHistory after the refusal: got error %v, want ErrNotFound", err)
			}
		})
	}
}

func testConcurrentHistory(t *testing.T, s meta.Store) {
	for r := range rounds {
		k := meta.ThreadKey{Tenant: "acme", Thread: fmt.Sprintf("t-%d", r)}
		// Creates race: one history is stored.
		results := make([]meta.History, concurrency)
		errs := race(func(i int) error {
			h := history(k)
			h.Head = fmt.Sprintf("create-%d", i)
			var err error
			results[i], err = s.PutHistory(t.Context(), h)
			return err
		})
		w := checkOneWinner(t, fmt.Sprintf("round %d PutHistory create", r), errs, meta.ErrExists)
		if w < 0 {
			continue
		}
		cur := mustGetHistory(t, s, k)
		if cur.Head != results[w].Head || cur.Revision != results[w].Revision {
			t.Errorf("round %d GetHistory after the creates: got head %q revision %d, want the winner's %q %d",
				r, cur.Head, cur.Revision, results[w].Head, results[w].Revision)
		}

		// Replaces of one revision race: one wins.
		errs = race(func(i int) error {
			h := cur // every goroutine read the same revision
			h.Head = fmt.Sprintf("replace-%d", i)
			var err error
			results[i], err = s.PutHistory(t.Context(), h)
			return err
		})
		w = checkOneWinner(t, fmt.Sprintf("round %d PutHistory replace", r), errs, meta.ErrConflict)
		if w < 0 {
			continue
		}
		got := mustGetHistory(t, s, k)
		if want := fmt.Sprintf("replace-%d", w); got.Head != want || got.Revision != results[w].Revision {
			t.Errorf("round %d GetHistory after the replaces: got head %q revision %d, want the winner's %q %d",
				r, got.Head, got.Revision, want, results[w].Revision)
		}
	}
}
