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
