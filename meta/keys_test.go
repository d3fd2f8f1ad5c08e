package meta

import (
	"bytes"
	"cmp"
	"strings"
	"testing"
)

func TestBindingKey(t *testing.T) {
	tests := []struct {
		k    ThreadKey
		want string
	}{
		{ThreadKey{"", ""}, "binding/\x00\x01\x00\x01"},
		{ThreadKey{"acme", "t-1"}, "binding/acme\x00\x01t-1\x00\x01"},
		{ThreadKey{"a/b", "c"}, "binding/a/b\x00\x01c\x00\x01"},
		{ThreadKey{"a\x00", "\x00b"}, "binding/a\x00\xff\x00\x01\x00\xffb\x00\x01"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := string(bindingKey(tt.k)); got != tt.want {
				t.Errorf("bindingKey(%q) = %q, want %q", tt.k, got, tt.want)
			}
			got, err := parseBindingKey([]byte(tt.want))
			if err != nil || got != tt.k {
				t.Errorf("parseBindingKey(%q) = %q, %v, want %q", tt.want, got, err, tt.k)
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
			if k, err := parseBindingKey([]byte(key)); err == nil {
				t.Errorf("parseBindingKey(%q) = %q, want an error", key, k)
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
		a, b := ThreadKey{t1, th1}, ThreadKey{t2, th2}
		ka, kb := bindingKey(a), bindingKey(b)
		if got, want := bytes.Compare(ka, kb), cmp.Or(strings.Compare(t1, t2), strings.Compare(th1, th2)); got != want {
			t.Errorf("key order of %q and %q: got %d, want %d", a, b, got, want)
		}
		for _, c := range []struct {
			k   ThreadKey
			key []byte
		}{{a, ka}, {b, kb}} {
			got, err := parseBindingKey(c.key)
			if err != nil || got != c.k {
				t.Errorf("parseBindingKey(bindingKey(%q)) = %q, %v", c.k, got, err)
			}
		}
	})
}
