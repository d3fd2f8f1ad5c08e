package testenv

import (
	"slices"
	"testing"
)

func TestUnescapeOctal(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"/plain/path", "/plain/path"},
		{`/with\040space`, "/with space"},
		{`/tab\011and\134backslash`, "/tab\tand\\backslash"},
		{`/ends\040`, "/ends "},
		{`/short\04`, `/short\04`},
		{`/not\08octal`, `/not\08octal`},
		{`/too\777big`, `/too\777big`},
	} {
		if got := unescapeOctal(tt.in); got != tt.want {
			t.Errorf("unescapeOctal(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestMountsUnderRoot(t *testing.T) {
	got := MountsUnder(t, "/")
	if len(got) == 0 {
		t.Fatal(`MountsUnder("/") is empty`)
	}
	if i := slices.IndexFunc(got, func(p string) bool { return p == "" || p[0] != '/' }); i >= 0 {
		t.Errorf(`MountsUnder("/") lists %q, not an absolute path`, got[i])
	}
	if n := len(Mounts(t)); len(got) != n {
		t.Errorf(`MountsUnder("/") lists %d mounts, the table has %d`, len(got), n)
	}
}
