package keys

import (
	"bytes"
	"cmp"
	"strings"
	"testing"

	"warren/meta"
)

func TestBindingKey(t *testing.T) {
	tests := []struct {
		k    meta.ThreadKey
		want string
	}{
		{meta.ThreadKey{Tenant: "", Thread: ""}, "binding/\x00\x01\x00\x01"},
		{meta.ThreadKey{Tenant: "acme", Thread: "t-1"}, "binding/acme\x00\x01t-1\x00\x01"},
		{meta.ThreadKey{Tenant: "a/b", Thread: "c"}, "binding/a/b\x00\x01c\x00\x01"},
		{meta.ThreadKey{Tenant: "a\x00", Thread: "\x00b"}, "binding/a\x00\xff\x00\x01\x00\xffb\x00\x01"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := string(Binding(tt.k)); got != tt.want {
				t.Errorf("Binding(%q) = %q, want %q", tt.k, got, tt.want)
			}
			got, err := ParseBinding([]byte(tt.want))
			if err != nil || got != tt.k {
				t.Errorf("ParseBinding(%q) = %q, %v, want %q", tt.want, got, err, tt.k)
			}
		})
	}
}

func TestParseBindingKeyRefuses(t *testing.T) {
	for _, key := range []string{
		"",
		"imount/x",
		"binding/",
		"binding/a",
		"binding/a\x00\x01",
		"binding/a\x00\x01b",
		"binding/a\x00\x01b\x00",
		"binding/a\x00\x02b\x00\x01",
		"binding/a\x00\x01b\x00\x01c",
	} {
		t.Run(key, func(t *testing.T) {
			if k, err := ParseBinding([]byte(key)); err == nil {
				t.Errorf("ParseBinding(%q) = %q, want an error", key, k)
			}
		})
	}
}

// FuzzBindingKey checks the two promises of the key layout on any pair of
// thread keys: equal keys exactly for equal ids (injective, and parse
// inverts it), and byte order equal to (tenant, thread) order.
func FuzzBindingKey(f *testing.F) {
	seeds := [][4]string{
		{"a", "b/c", "a/b", "c"},
		{"a", "", "a\x00", ""},
		{"a\x00", "b", "a", "\x00b"},
		{"", "\x00\x01", "\x00\x01", ""},
		{"\x00\xff", "", "\x00", "\xff"},
		{"a", "z", "ab", ""},
		{"T", "t", "t", "T"},
		{strings.Repeat("x", 300), "", strings.Repeat("x", 299), "x"},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1], s[2], s[3])
	}
	f.Fuzz(func(t *testing.T, t1, th1, t2, th2 string) {
		a, b := meta.ThreadKey{Tenant: t1, Thread: th1}, meta.ThreadKey{Tenant: t2, Thread: th2}
		ka, kb := Binding(a), Binding(b)
		if got, want := bytes.Compare(ka, kb), cmp.Or(strings.Compare(t1, t2), strings.Compare(th1, th2)); got != want {
			t.Errorf("key order of %q and %q: got %d, want %d", a, b, got, want)
		}
		for _, c := range []struct {
			k   meta.ThreadKey
			key []byte
		}{{a, ka}, {b, kb}} {
			got, err := ParseBinding(c.key)
			if err != nil || got != c.k {
				t.Errorf("ParseBinding(Binding(%q)) = %q, %v", c.k, got, err)
			}
		}
	})
}

func TestHistoryKey(t *testing.T) {
	tests := []struct {
		k    meta.ThreadKey
		want string
	}{
		{meta.ThreadKey{Tenant: "", Thread: ""}, "history/\x00\x01\x00\x01"},
		{meta.ThreadKey{Tenant: "acme", Thread: "t-1"}, "history/acme\x00\x01t-1\x00\x01"},
		{meta.ThreadKey{Tenant: "a/b", Thread: ".."}, "history/a/b\x00\x01..\x00\x01"},
		{meta.ThreadKey{Tenant: "a\x00", Thread: "\x00\xff"}, "history/a\x00\xff\x00\x01\x00\xff\xff\x00\x01"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := string(History(tt.k)); got != tt.want {
				t.Errorf("History(%q) = %q, want %q", tt.k, got, tt.want)
			}
			got, err := ParseHistory([]byte(tt.want))
			if err != nil || got != tt.k {
				t.Errorf("ParseHistory(%q) = %q, %v, want %q", tt.want, got, err, tt.k)
			}
		})
	}
}

func TestParseHistoryKeyRefuses(t *testing.T) {
	for _, key := range []string{
		"",
		"binding/a\x00\x01b\x00\x01",
		"history/",
		"history/a",
		"history/a\x00\x01",
		"history/a\x00\x01b",
		"history/a\x00\x01b\x00",
		"history/a\x00\x02b\x00\x01",
		"history/a\x00\x01b\x00\x01c",
	} {
		t.Run(key, func(t *testing.T) {
			if k, err := ParseHistory([]byte(key)); err == nil {
				t.Errorf("ParseHistory(%q) = %q, want an error", key, k)
			}
		})
	}
}

func TestHistoriesPrefix(t *testing.T) {
	tests := []struct {
		tenant string
		want   string
	}{
		{"", "history/\x00\x01"},
		{"acme", "history/acme\x00\x01"},
		{"a\x00", "history/a\x00\xff\x00\x01"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := string(Histories(tt.tenant)); got != tt.want {
				t.Errorf("Histories(%q) = %q, want %q", tt.tenant, got, tt.want)
			}
		})
	}
}

// FuzzHistoriesPrefix checks the promise ListHistories scans by: a
// tenant's prefix starts exactly the history keys of that tenant's
// threads, whatever the two tenants are (one a prefix of the other, NUL
// bytes, empty).
func FuzzHistoriesPrefix(f *testing.F) {
	seeds := [][3]string{
		{"a", "a/b", "t"},
		{"a", "a\x00", ""},
		{"a\x00", "a", "\x00"},
		{"", "\x00", ""},
		{"", "", "x"},
		{"\x00\xff", "\x00", "\xff"},
		{"..", ".", ".."},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, tenant, other, thread string) {
		k := meta.ThreadKey{Tenant: other, Thread: thread}
		key := History(k)
		if got, want := bytes.HasPrefix(key, Histories(tenant)), tenant == other; got != want {
			t.Errorf("History(%q) starts with Histories(%q): got %v, want %v", k, tenant, got, want)
		}
		if got, err := ParseHistory(key); err != nil || got != k {
			t.Errorf("ParseHistory(History(%q)) = %q, %v", k, got, err)
		}
	})
}
