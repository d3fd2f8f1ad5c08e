package mountinfo

import "testing"

func TestUnescape(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"/plain/path", "/plain/path"},
		{`/with\040space`, "/with space"},
		{`/tab\011and\134backslash`, "/tab\tand\\backslash"},
		{`/new\012line`, "/new\nline"},
		{`/ends\040`, "/ends "},
		{`/short\04`, `/short\04`},
		{`/not\08octal`, `/not\08octal`},
		{`/too\777big`, `/too\777big`},
		{`\`, `\`},
	} {
		if got := Unescape(tt.in); got != tt.want {
			t.Errorf("Unescape(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
