package gateway

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"warren/api"
	"warren/gateway/threads"
	"warren/meta"
)

// listPage sends GET /v1/threads with the query q and decodes the page.
func listPage(t *testing.T, env *testEnv, q url.Values) api.ThreadsResponse {
	t.Helper()
	target := "/v1/threads"
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	resp := rawRequest(t, env.g.SocketPath(), "GET", target, nil)
	if resp.status != 200 {
		t.Fatalf("GET %s: got %d %s, want 200", target, resp.status, resp.body)
	}
	var page api.ThreadsResponse
	if err := json.Unmarshal(resp.body, &page); err != nil {
		t.Fatalf("GET %s: decode %q: %v", target, resp.body, err)
	}
	return page
}

// TestListThreadsPages binds 250 threads and pages through them: the
// pages are exact, in order, with no thread twice and none missing, and
// a tenant's listing pages the same way.
func TestListThreadsPages(t *testing.T) {
	env := startEnv(t, Config{})
	ctx := t.Context()
	var want []string
	tenantOf := func(i int) string { return fmt.Sprintf("tenant-%d", i%3) }
	for i := range 250 {
		want = append(want, tenantOf(i)+"/"+fmt.Sprintf("t-%03d", i))
	}
	slices.Sort(want)
	// Four binders at once: the pages are read once all are bound.
	var wg sync.WaitGroup
	errs := make(chan error, 250)
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < 250; i += 4 {
				if _, err := env.c.Bind(ctx, tenantOf(i), fmt.Sprintf("t-%03d", i)); err != nil {
					errs <- fmt.Errorf("bind %d: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	// pageAll reads every page of q's listing, limit at a time.
	pageAll := func(t *testing.T, q url.Values, wantSizes []int) []string {
		t.Helper()
		var got []string
		var sizes []int
		for {
			page := listPage(t, env, q)
			sizes = append(sizes, len(page.Bindings))
			for _, ti := range page.Bindings {
				got = append(got, ti.Tenant+"/"+ti.Thread)
				if !ti.Mounted || ti.State != meta.StateBound {
					t.Errorf("%s/%s: got mounted %v state %q, want mounted and bound", ti.Tenant, ti.Thread, ti.Mounted, ti.State)
				}
			}
			if page.NextCursor == "" {
				break
			}
			if len(sizes) > 300 {
				t.Fatalf("more than 300 pages: the cursor does not move")
			}
			q.Set("cursor", page.NextCursor)
		}
		if wantSizes != nil && !slices.Equal(sizes, wantSizes) {
			t.Errorf("got pages of %v, want %v", sizes, wantSizes)
		}
		return got
	}

	t.Run("limit 100", func(t *testing.T) {
		got := pageAll(t, url.Values{"limit": {"100"}}, []int{100, 100, 50})
		if !slices.Equal(got, want) {
			t.Errorf("pages:\ngot  %q\nwant %q", got, want)
		}
	})
	t.Run("default limit", func(t *testing.T) {
		page := listPage(t, env, nil)
		if len(page.Bindings) != api.ThreadsPageDefault || page.NextCursor == "" {
			t.Errorf("got %d bindings, cursor %q; want %d and a cursor", len(page.Bindings), page.NextCursor, api.ThreadsPageDefault)
		}
	})
	t.Run("limit 250 is one page", func(t *testing.T) {
		pageAll(t, url.Values{"limit": {"250"}}, []int{250})
	})
	t.Run("one tenant", func(t *testing.T) {
		var wantTenant []string
		for _, id := range want {
			if strings.HasPrefix(id, "tenant-1/") {
				wantTenant = append(wantTenant, id)
			}
		}
		got := pageAll(t, url.Values{"tenant": {"tenant-1"}, "limit": {"30"}}, []int{30, 30, 23})
		if !slices.Equal(got, wantTenant) {
			t.Errorf("pages:\ngot  %q\nwant %q", got, wantTenant)
		}
	})
	t.Run("client follows the pages", func(t *testing.T) {
		tis, err := env.c.Threads(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, ti := range tis {
			got = append(got, ti.Tenant+"/"+ti.Thread)
		}
		if !slices.Equal(got, want) {
			t.Errorf("Threads:\ngot  %q\nwant %q", got, want)
		}
		page, err := env.c.ThreadsPage(ctx, nil, 7, "")
		if err != nil || len(page.Bindings) != 7 || page.NextCursor == "" {
			t.Fatalf("ThreadsPage(7): got %d bindings, cursor %q, %v", len(page.Bindings), page.NextCursor, err)
		}
		next, err := env.c.ThreadsPage(ctx, nil, 7, page.NextCursor)
		if err != nil || len(next.Bindings) != 7 || next.Bindings[0].Tenant+"/"+next.Bindings[0].Thread != want[7] {
			t.Errorf("ThreadsPage(7, cursor): got %d bindings from %v, want 7 from %s (%v)", len(next.Bindings), next.Bindings[:min(1, len(next.Bindings))], want[7], err)
		}
	})
	t.Run("a cursor of another tenant", func(t *testing.T) {
		page := listPage(t, env, url.Values{"tenant": {"tenant-1"}, "limit": {"5"}})
		resp := rawRequest(t, env.g.SocketPath(), "GET", "/v1/threads?"+url.Values{"tenant": {"tenant-2"}, "cursor": {page.NextCursor}}.Encode(), nil)
		if resp.status != 400 || !strings.Contains(resp.apiError(t).Message, "cursor") {
			t.Errorf("got %d %s, want 400 naming the cursor", resp.status, resp.body)
		}
	})
}

// rawCursor is a cursor of the given bytes, as a client might forge one.
func rawCursor(b ...[]byte) string {
	return base64.RawURLEncoding.EncodeToString(slices.Concat(b...))
}

func TestListThreadsRefusesBadPages(t *testing.T) {
	env := startEnv(t, Config{})
	long := strings.Repeat("x", api.MaxIDBytes+1)
	v1 := []byte{threads.CursorVersion}
	uv := func(n uint64) []byte { return binary.AppendUvarint(nil, n) }
	tests := []struct {
		name  string
		query string
		want  string // in the message
	}{
		{"limit zero", "limit=0", "limit"},
		{"limit negative", "limit=-1", "limit"},
		{"limit over the max", fmt.Sprintf("limit=%d", api.ThreadsPageMax+1), "limit"},
		{"limit huge", "limit=99999999999999999999999", "limit"},
		{"limit not a number", "limit=ten", "limit"},
		{"limit float", "limit=1e3", "limit"},
		{"limit empty", "limit=", "limit"},
		{"limit with space", "limit=%205", "limit"},
		{"limit twice", "limit=1&limit=2", "limit"},
		{"cursor empty", "cursor=", "cursor"},
		{"cursor twice", "cursor=a&cursor=b", "cursor"},
		{"cursor not base64", "cursor=%21%21%21", "cursor"},
		{"cursor padded", "cursor=" + url.QueryEscape(base64.URLEncoding.EncodeToString([]byte{1, 1, 'a', 'b'})), "cursor"},
		{"cursor std alphabet", "cursor=" + url.QueryEscape(base64.RawStdEncoding.EncodeToString([]byte{1, 1, 0xfb, 0xff, 'b'})), "cursor"},
		{"cursor too long", "cursor=" + strings.Repeat("A", threads.MaxCursorBytes+1), "cursor"},
		{"cursor unknown version", "cursor=" + rawCursor([]byte{2}, uv(1), []byte("ab")), "cursor"},
		{"cursor of one byte", "cursor=" + rawCursor(v1), "cursor"},
		{"cursor bad varint", "cursor=" + rawCursor(v1, []byte{0xff, 0xff}), "cursor"},
		{"cursor empty tenant", "cursor=" + rawCursor(v1, uv(0), []byte("t")), "cursor"},
		{"cursor tenant longer than the cursor", "cursor=" + rawCursor(v1, uv(50), []byte("ab")), "cursor"},
		{"cursor tenant length overflows", "cursor=" + rawCursor(v1, uv(1<<63), []byte("ab")), "cursor"},
		{"cursor empty thread", "cursor=" + rawCursor(v1, uv(1), []byte("a")), "cursor"},
		{"cursor long thread", "cursor=" + rawCursor(v1, uv(1), []byte("a"+long)), "cursor"},
		{"cursor long tenant", "cursor=" + rawCursor(v1, uv(uint64(len(long))), []byte(long+"t")), "cursor"},
		{"cursor not utf-8", "cursor=" + rawCursor(v1, uv(1), []byte("a\xff")), "cursor"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := rawRequest(t, env.g.SocketPath(), "GET", "/v1/threads?"+tt.query, nil)
			if resp.status != 400 {
				t.Fatalf("got %d %s, want 400", resp.status, resp.body)
			}
			if e := resp.apiError(t); e.Code != api.CodeInvalid || !strings.Contains(e.Message, tt.want) {
				t.Errorf("got %+v, want code %q and a message naming %q", e, api.CodeInvalid, tt.want)
			}
		})
	}
	// A well-formed cursor of a thread that is not bound is a place to
	// start, not an error.
	if _, err := env.c.Bind(t.Context(), "a", "t2"); err != nil {
		t.Fatal(err)
	}
	page := listPage(t, env, url.Values{"cursor": {threads.EncodeCursor(meta.ThreadKey{Tenant: "a", Thread: "t1"})}})
	if len(page.Bindings) != 1 || page.Bindings[0].Thread != "t2" || page.NextCursor != "" {
		t.Errorf("after an unbound a/t1: got %+v, want a/t2 alone", page)
	}
}
