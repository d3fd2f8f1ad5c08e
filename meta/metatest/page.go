package metatest

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"warren/meta"
)

// The tests of ListBindingsPage: pages are exact, follow the order of
// ListBindings, filter by tenant, start after any key (stored or not,
// of another tenant or past the end), and a listing that pages while
// bindings are created lists every binding stored throughout once.

// listAllPages pages through the bindings of tenant (every tenant if nil)
// limit at a time and returns every page's keys.
func listAllPages(t testing.TB, s meta.Store, tenant *string, limit int) [][]meta.ThreadKey {
	t.Helper()
	var pages [][]meta.ThreadKey
	var after *meta.ThreadKey
	for {
		page, more, err := s.ListBindingsPage(t.Context(), tenant, after, limit)
		if err != nil {
			t.Fatalf("ListBindingsPage(tenant %s, after %s, %d): %v", showTenant(tenant), showKey(after), limit, err)
		}
		if len(page) > limit {
			t.Fatalf("ListBindingsPage(limit %d): got %d bindings", limit, len(page))
		}
		if more && len(page) == 0 {
			t.Fatalf("ListBindingsPage(after %s): an empty page says more follow", showKey(after))
		}
		if more && len(page) < limit {
			t.Errorf("ListBindingsPage(after %s, %d): a short page of %d says more follow", showKey(after), limit, len(page))
		}
		keys := make([]meta.ThreadKey, len(page))
		for i, b := range page {
			keys[i] = b.ThreadKey
		}
		pages = append(pages, keys)
		if !more {
			return pages
		}
		if len(pages) > 10000 {
			t.Fatalf("ListBindingsPage: more than 10000 pages; the cursor does not move")
		}
		last := page[len(page)-1].ThreadKey
		after = &last
	}
}

func showTenant(tenant *string) string {
	if tenant == nil {
		return "(all)"
	}
	return fmt.Sprintf("%q", *tenant)
}

func showKey(k *meta.ThreadKey) string {
	if k == nil {
		return "(start)"
	}
	return fmt.Sprintf("%q", *k)
}

// pagedKeys creates a binding for each of the hostile keys and a few
// ordinary ones, and returns them sorted.
func pagedKeys(t *testing.T, s meta.Store) []meta.ThreadKey {
	t.Helper()
	keys := hostileKeys()
	for i := range 7 {
		keys = append(keys, meta.ThreadKey{Tenant: "acme", Thread: fmt.Sprintf("t-%02d", i)})
	}
	for i, k := range keys {
		mustCreate(t, s, binding(k.Tenant, k.Thread, fmt.Sprintf("/r/%d", i)))
	}
	slices.SortFunc(keys, compareKeys)
	return keys
}

func testListPages(t *testing.T, s meta.Store) {
	want := pagedKeys(t, s)
	all := mustList(t, s)
	for _, limit := range []int{1, 2, 3, 7, len(want) - 1, len(want), len(want) + 5} {
		t.Run(fmt.Sprint("limit ", limit), func(t *testing.T) {
			pages := listAllPages(t, s, nil, limit)
			// Exact pages: full ones, then the rest; no empty page after
			// a full last one.
			wantPages := (len(want) + limit - 1) / limit
			if len(pages) != wantPages {
				t.Errorf("got %d pages, want %d", len(pages), wantPages)
			}
			for i, p := range pages[:len(pages)-1] {
				if len(p) != limit {
					t.Errorf("page %d: got %d bindings, want %d", i, len(p), limit)
				}
			}
			if got := slices.Concat(pages...); !slices.Equal(got, want) {
				t.Errorf("pages:\ngot  %q\nwant %q", got, want)
			}
		})
	}
	// A page carries the records, as ListBindings does.
	page, _, err := s.ListBindingsPage(t.Context(), nil, nil, len(all))
	if err != nil {
		t.Fatalf("ListBindingsPage: %v", err)
	}
	for i := range min(len(page), len(all)) {
		checkBinding(t, fmt.Sprintf("ListBindingsPage[%d]", i), page[i], all[i])
		if page[i].Revision != all[i].Revision {
			t.Errorf("ListBindingsPage[%d]: got revision %d, want %d", i, page[i].Revision, all[i].Revision)
		}
	}
}

func testListPagesOfTenant(t *testing.T, s meta.Store) {
	keys := pagedKeys(t, s)
	tenants := []string{"", "a", "a\x00", "\x00", "acme", "t", "\xff", "missing"}
	for _, tenant := range tenants {
		var want []meta.ThreadKey
		for _, k := range keys {
			if k.Tenant == tenant {
				want = append(want, k)
			}
		}
		for _, limit := range []int{1, 2, 100} {
			t.Run(fmt.Sprintf("tenant %q limit %d", tenant, limit), func(t *testing.T) {
				got := slices.Concat(listAllPages(t, s, &tenant, limit)...)
				if !slices.Equal(got, want) {
					t.Errorf("pages:\ngot  %q\nwant %q", got, want)
				}
			})
		}
	}
}

func testListPageAfter(t *testing.T, s meta.Store) {
	for _, k := range []meta.ThreadKey{{Tenant: "a", Thread: "1"}, {Tenant: "a", Thread: "3"}, {Tenant: "b", Thread: "1"}, {Tenant: "b", Thread: "3"}} {
		mustCreate(t, s, binding(k.Tenant, k.Thread, "/r/"+k.Tenant+k.Thread))
	}
	a, b := "a", "b"
	tests := []struct {
		name     string
		tenant   *string
		after    meta.ThreadKey
		want     []meta.ThreadKey
		wantMore bool
	}{
		{"a key not stored", nil, meta.ThreadKey{Tenant: "a", Thread: "2"}, []meta.ThreadKey{{Tenant: "a", Thread: "3"}, {Tenant: "b", Thread: "1"}}, true},
		{"the last of a tenant", nil, meta.ThreadKey{Tenant: "a", Thread: "3"}, []meta.ThreadKey{{Tenant: "b", Thread: "1"}, {Tenant: "b", Thread: "3"}}, false},
		{"a thread id that extends a stored one", nil, meta.ThreadKey{Tenant: "a", Thread: "1\x00"}, []meta.ThreadKey{{Tenant: "a", Thread: "3"}, {Tenant: "b", Thread: "1"}}, true},
		{"the last key", nil, meta.ThreadKey{Tenant: "b", Thread: "3"}, nil, false},
		{"past the end", nil, meta.ThreadKey{Tenant: "\xff\xff", Thread: "z"}, nil, false},
		{"the empty key", nil, meta.ThreadKey{}, []meta.ThreadKey{{Tenant: "a", Thread: "1"}, {Tenant: "a", Thread: "3"}}, true},
		{"a tenant, after a key of one before it", &b, meta.ThreadKey{Tenant: "a", Thread: "3"}, []meta.ThreadKey{{Tenant: "b", Thread: "1"}, {Tenant: "b", Thread: "3"}}, false},
		{"a tenant, after a key of one after it", &a, meta.ThreadKey{Tenant: "b", Thread: "1"}, nil, false},
		{"a tenant, after its empty thread", &b, meta.ThreadKey{Tenant: "b"}, []meta.ThreadKey{{Tenant: "b", Thread: "1"}, {Tenant: "b", Thread: "3"}}, false},
		{"a tenant, after its last", &a, meta.ThreadKey{Tenant: "a", Thread: "3"}, nil, false},
		{"a tenant that extends another", &a, meta.ThreadKey{Tenant: "a\x00", Thread: ""}, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			page, more, err := s.ListBindingsPage(t.Context(), tt.tenant, &tt.after, 2)
			if err != nil {
				t.Fatalf("ListBindingsPage: %v", err)
			}
			got := make([]meta.ThreadKey, len(page))
			for i, b := range page {
				got[i] = b.ThreadKey
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
			if more != tt.wantMore {
				t.Errorf("got more %v, want %v", more, tt.wantMore)
			}
		})
	}
	for _, limit := range []int{0, -1} {
		if _, _, err := s.ListBindingsPage(t.Context(), nil, nil, limit); err == nil {
			t.Errorf("ListBindingsPage with limit %d: got no error", limit)
		}
	}
}

// testListPagesWhileCreating pages through the bindings while others are
// created, between pages and concurrently: every binding stored before
// the listing began is listed exactly once, and the listing stays in
// order (so lists nothing twice).
func testListPagesWhileCreating(t *testing.T, s meta.Store) {
	var stored []meta.ThreadKey
	for i := range 30 {
		k := meta.ThreadKey{Tenant: "acme", Thread: fmt.Sprintf("t-%03d", i*10)}
		mustCreate(t, s, binding(k.Tenant, k.Thread, "/r/"+k.Thread))
		stored = append(stored, k)
	}

	// A writer creates bindings all over the key range while the
	// listing runs; it stops when the listing is done.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			k := meta.ThreadKey{Tenant: "acme", Thread: fmt.Sprintf("t-%03d-w%d", (i*7)%300, i)}
			if _, err := s.CreateBinding(t.Context(), binding(k.Tenant, k.Thread, "/r/"+k.Thread)); err != nil {
				t.Errorf("CreateBinding(%q) while listing: %v", k, err)
				return
			}
		}
	}()
	var got, befores, laters []meta.ThreadKey
	var after *meta.ThreadKey
	for {
		bs, more, err := s.ListBindingsPage(t.Context(), nil, after, 4)
		if err != nil {
			t.Fatalf("ListBindingsPage: %v", err)
		}
		for _, b := range bs {
			got = append(got, b.ThreadKey)
		}
		if !more {
			break
		}
		// Between pages, create one binding before the cursor and one
		// after it: the first is never listed, the second is.
		last := bs[len(bs)-1].ThreadKey
		before := meta.ThreadKey{Tenant: last.Tenant, Thread: last.Thread[:len(last.Thread)-1]}
		later := meta.ThreadKey{Tenant: last.Tenant, Thread: last.Thread + "-between"}
		for _, k := range []meta.ThreadKey{before, later} {
			if _, err := s.CreateBinding(t.Context(), binding(k.Tenant, k.Thread, "/r/"+k.Thread)); err != nil {
				t.Fatalf("CreateBinding(%q) between pages: %v", k, err)
			}
		}
		befores, laters = append(befores, before), append(laters, later)
		after = &last
	}
	close(stop)
	wg.Wait()

	if !slices.IsSortedFunc(got, compareKeys) {
		t.Errorf("the pages are out of order: %q", got)
	}
	for i := 1; i < len(got); i++ {
		if got[i] == got[i-1] {
			t.Errorf("%q listed twice", got[i])
		}
	}
	for _, k := range stored {
		if !slices.Contains(got, k) {
			t.Errorf("%q, stored before the listing, is not listed", k)
		}
	}
	for _, k := range laters {
		if !slices.Contains(got, k) {
			t.Errorf("%q, created after the cursor between pages, is not listed", k)
		}
	}
	for _, k := range befores {
		if slices.Contains(got, k) {
			t.Errorf("%q, created before the cursor between pages, is listed", k)
		}
	}
}
