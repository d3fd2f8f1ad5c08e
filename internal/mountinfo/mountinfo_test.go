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

// TestScan reads this process's table: every line is read, "/" is in it,
// and a line not as proc(5) says is an error.
func TestScan(t *testing.T) {
	var root bool
	n := 0
	if err := Scan("/proc/self/mountinfo", func(e Entry) bool {
		n++
		root = root || e.Path == "/"
		return true
	}); err != nil || n == 0 || !root {
		t.Fatalf("Scan: %d entries, root %v, %v", n, root, err)
	}
	e, err := parse(`36 35 98:0 /mnt1 /mnt/a\040b rw,noatime master:1 - ext3 /dev/root rw,errors=continue`)
	if err != nil || e.ID != 36 || e.Parent != 35 || e.Path != "/mnt/a b" || e.FSType != "ext3" || e.Source != "/dev/root" || e.Options != "rw,noatime" {
		t.Errorf("parse: %+v, %v", e, err)
	}
	for _, bad := range []string{"", "36 35 98:0 / /mnt rw", "x 35 98:0 / /mnt rw - ext3 /dev/root rw", "36 35 98:0 / /mnt rw -"} {
		if _, err := parse(bad); err == nil {
			t.Errorf("parse(%q) took it", bad)
		}
	}
}
