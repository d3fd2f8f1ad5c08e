package threads

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"warren/api"
)

// decodeID inverts EncodeID for ids whose encoding was kept whole (no '~').
func decodeID(enc string) (string, error) {
	if enc == "%" {
		return "", nil
	}
	if strings.Contains(enc, "~") {
		return "", fmt.Errorf("decode %q: shortened encodings cannot be decoded", enc)
	}
	var b strings.Builder
	for i := 0; i < len(enc); i++ {
		if enc[i] != '%' {
			b.WriteByte(enc[i])
			continue
		}
		if i+3 > len(enc) {
			return "", fmt.Errorf("decode %q: truncated escape at %d", enc, i)
		}
		v, err := strconv.ParseUint(enc[i+1:i+3], 16, 8)
		if err != nil {
			return "", fmt.Errorf("decode %q: escape at %d: %w", enc, i, err)
		}
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String(), nil
}

// checkRoot asserts the promises of WorkspaceRoot for one pair of ids.
func checkRoot(t testing.TB, base, tenant, thread string) string {
	t.Helper()
	p, err := WorkspaceRoot(base, tenant, thread)
	if err != nil {
		t.Fatalf("WorkspaceRoot(%q, %q, %q): %v", base, tenant, thread, err)
	}
	rel, err := filepath.Rel(base, p)
	if err != nil {
		t.Fatalf("Rel(%q, %q): %v", base, p, err)
	}
	parts := strings.Split(rel, "/")
	if len(parts) != 2 {
		t.Fatalf("WorkspaceRoot(%q, %q) = %q: got %d components below base, want 2", tenant, thread, p, len(parts))
	}
	for _, c := range parts {
		if c == "" || c == "." || c == ".." || strings.ContainsAny(c, "/\x00") || len(c) > 255 {
			t.Fatalf("WorkspaceRoot(%q, %q) = %q: bad component %q (len %d)", tenant, thread, p, c, len(c))
		}
	}
	if filepath.Dir(filepath.Dir(p)) != base {
		t.Fatalf("WorkspaceRoot(%q, %q) = %q: not two levels below %q", tenant, thread, p, base)
	}
	return p
}

func TestWorkspaceRootHostileIDs(t *testing.T) {
	const base = "/srv/workspaces"
	long := strings.Repeat("x", 300)
	longUpper := strings.Repeat("X", 300)
	tests := []struct {
		name           string
		tenant, thread string
		want           string // "" means: only check the promises
	}{
		{"plain", "acme", "fix-login", "/srv/workspaces/acme/fix-login"},
		{"default tenant", "", "t-1", "/srv/workspaces/default/t-1"},
		{"traversal", "acme", "../other-tenant/t-1", "/srv/workspaces/acme/%2e.%2fother-tenant%2ft-1"},
		{"dotdot", "acme", "..", "/srv/workspaces/acme/%2e."},
		{"dot", "acme", ".", "/srv/workspaces/acme/%2e"},
		{"dotdot tenant", "..", "..", "/srv/workspaces/%2e./%2e."},
		{"slash", "acme", "a/b", "/srv/workspaces/acme/a%2fb"},
		{"backslash", "acme", `a\b`, "/srv/workspaces/acme/a%5cb"},
		{"empty thread", "acme", "", "/srv/workspaces/acme/%"},
		{"nul", "acme", "a\x00b", "/srv/workspaces/acme/a%00b"},
		{"only nul", "acme", "\x00", "/srv/workspaces/acme/%00"},
		{"percent escapes", "acme", "%2e%2e", "/srv/workspaces/acme/%252e%252e"},
		{"tilde", "acme", "~root", "/srv/workspaces/acme/%7eroot"},
		{"cyrillic a", "acme", "\u0430", "/srv/workspaces/acme/%d0%b0"},
		{"latin a", "acme", "a", "/srv/workspaces/acme/a"},
		{"fullwidth dots", "acme", "\uff0e\uff0e", "/srv/workspaces/acme/%ef%bc%8e%ef%bc%8e"},
		{"upper case", "acme", "Fix", "/srv/workspaces/acme/%46ix"},
		{"lower case", "acme", "fix", "/srv/workspaces/acme/fix"},
		{"slash only", "/", "/", "/srv/workspaces/%2f/%2f"},
		{"long", "acme", long, ""},
		{"long upper", "acme", longUpper, ""},
		{"long differs past 250", "acme", long + "a", ""},
		{"long differs past 250 b", "acme", long + "b", ""},
		{"long traversal", "acme", strings.Repeat("../", 200), ""},
		{"long tenant", long, "t", ""},
		{"long non-ascii", "acme", strings.Repeat("\u0430", 200), ""},
	}
	seen := make(map[string]string)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := checkRoot(t, base, tt.tenant, tt.thread)
			if tt.want != "" && got != tt.want {
				t.Errorf("WorkspaceRoot(%q, %q) = %q, want %q", tt.tenant, tt.thread, got, tt.want)
			}
			if other, ok := seen[got]; ok {
				t.Errorf("WorkspaceRoot(%q, %q) = %q, the same folder as case %q", tt.tenant, tt.thread, got, other)
			}
			seen[got] = tt.name
		})
	}
}

func TestWorkspaceRootBase(t *testing.T) {
	tests := []struct {
		base    string
		wantErr bool
	}{
		{"/srv/w", false},
		{"/", false},
		{"", true},
		{"relative/dir", true},
		{"/srv/w/", true},
		{"/srv/../w", true},
		{"/srv//w", true},
		{"/srv/./w", true},
	}
	for _, tt := range tests {
		t.Run(tt.base, func(t *testing.T) {
			_, err := WorkspaceRoot(tt.base, "t", "th")
			if gotErr := err != nil; gotErr != tt.wantErr {
				t.Errorf("WorkspaceRoot(%q): got err %v, want error %v", tt.base, err, tt.wantErr)
			}
		})
	}
}

func TestEncodeIDLongForm(t *testing.T) {
	tests := []struct {
		name string
		id   string
	}{
		{"201 plain bytes", strings.Repeat("a", 201)},
		{"escapes across the cut", strings.Repeat("a", 127) + strings.Repeat("A", 100)},
		{"all escaped", strings.Repeat("\xff", 100)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := EncodeID(tt.id)
			prefix, sum, ok := strings.Cut(got, "~")
			if !ok {
				t.Fatalf("EncodeID(%d bytes) = %q, want a shortened form with '~'", len(tt.id), got)
			}
			if len(sum) != 64 {
				t.Errorf("hash part has %d hex digits, want 64", len(sum))
			}
			if len(prefix) > longPrefix {
				t.Errorf("prefix has %d bytes, want at most %d", len(prefix), longPrefix)
			}
			// The prefix must end on a token boundary: it decodes cleanly
			// and is a prefix of the raw id.
			dec, err := decodeID(prefix)
			if err != nil {
				t.Fatalf("prefix %q does not decode: %v", prefix, err)
			}
			if !strings.HasPrefix(tt.id, dec) {
				t.Errorf("decoded prefix %q is not a prefix of the id", dec)
			}
		})
	}
	if got := EncodeID(strings.Repeat("a", 200)); got != strings.Repeat("a", 200) {
		t.Errorf("EncodeID(200 bytes) = %q, want it kept whole", got)
	}
}

func TestDecodeRoundTrip(t *testing.T) {
	ids := []string{"", ".", "..", "a/b", "%", "%25", "~", "A", "\x00", "\u0430", ".hidden", "a.b."}
	for _, id := range ids {
		t.Run(strconv.Quote(id), func(t *testing.T) {
			got, err := decodeID(EncodeID(id))
			if err != nil {
				t.Fatalf("decode(encode(%q)): %v", id, err)
			}
			if got != id {
				t.Errorf("decode(encode(%q)) = %q, want %q", id, got, id)
			}
		})
	}
}

func TestWorkspaceRootErrorIsSentinel(t *testing.T) {
	_, err := WorkspaceRoot("rel", "a", "b")
	if err == nil || errors.Is(err, ErrOutsideBase) {
		t.Fatalf("relative base: got %v, want a plain error (bad base is not an escape)", err)
	}
}

// FuzzWorkspaceRoot checks containment and injectivity: every pair lands
// exactly two levels below base, two different pairs land in different
// folders, and short encodings decode back to the id.
func FuzzWorkspaceRoot(f *testing.F) {
	seeds := [][4]string{
		{"", "t", "default", "t"},
		{"acme", "../other-tenant/t-1", "other-tenant", "t-1"},
		{"a", "..", "a", "."},
		{"a", "a/b", "a/b", ""},
		{"a", `a\b`, "a", "a%5cb"},
		{"a", "\x00", "a", ""},
		{"a", "%2e%2e", "a", ".."},
		{"a", "\u0430", "a", "a"},
		{"a", "\uff0e\uff0e", "a", ".."},
		{"a", "Fix", "a", "fix"},
		{"a", strings.Repeat("x", 300) + "1", "a", strings.Repeat("x", 300) + "2"},
		{"a", strings.Repeat("x", 300), "a", strings.Repeat("x", 128) + "~"},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1], s[2], s[3])
	}
	const base = "/base"
	f.Fuzz(func(t *testing.T, t1, th1, t2, th2 string) {
		p1 := checkRoot(t, base, t1, th1)
		p2 := checkRoot(t, base, t2, th2)
		norm := func(s string) string {
			if s == "" {
				return api.DefaultTenant
			}
			return s
		}
		same := norm(t1) == norm(t2) && th1 == th2
		if same != (p1 == p2) {
			t.Fatalf("(%q,%q) -> %q and (%q,%q) -> %q: same ids %v, same folder %v",
				t1, th1, p1, t2, th2, p2, same, p1 == p2)
		}
		for _, id := range []string{t1, th1, t2, th2} {
			enc := EncodeID(id)
			if strings.Contains(enc, "~") {
				continue
			}
			got, err := decodeID(enc)
			if err != nil || got != id {
				t.Fatalf("decode(encode(%q)) = %q, %v; want %q", id, got, err, id)
			}
		}
	})
}
