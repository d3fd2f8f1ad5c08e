package policy_test

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"warren/network/policy"
)

func mustParse(t *testing.T, e policy.Egress) *policy.Rules {
	t.Helper()
	r, err := policy.Parse(e)
	if err != nil {
		t.Fatalf("Parse(%+v): %v", e, err)
	}
	return r
}

func TestParseRefuses(t *testing.T) {
	long := strings.Repeat("a", 60) + "." + strings.Repeat("b", 60) + "." + strings.Repeat("c", 60) + "." + strings.Repeat("d", 60) + ".com" // 248 bytes: fine
	tooLong := strings.Repeat("abcdefghi.", 30) + "com"                                                                                      // 303 bytes
	many := make([]string, policy.MaxRules+1)
	for i := range many {
		many[i] = fmt.Sprintf("10.0.%d.%d", i/256, i%256)
	}
	tests := []struct {
		name string
		e    policy.Egress
		want string // in the error; "" for no error
	}{
		{"zero", policy.Egress{}, ""},
		{"default allow", policy.Egress{Default: "allow"}, ""},
		{"default deny", policy.Egress{Default: "deny"}, ""},
		{"default other", policy.Egress{Default: "Deny"}, `egress: default "Deny" is neither "allow" nor "deny"`},
		{"empty rule", policy.Egress{Allow: []string{""}}, "egress: empty rule"},
		{"star", policy.Egress{Allow: []string{"*"}}, `egress: rule "*" is neither a CIDR, a host name nor *.domain`},
		{"star dot", policy.Egress{Deny: []string{"*."}}, `egress: rule "*." is not a valid *.domain: the name is empty`},
		{"two stars", policy.Egress{Allow: []string{"*.*.com"}}, `egress: rule "*.*.com" is not a valid *.domain: label "*" has "*"`},
		{"star inside", policy.Egress{Allow: []string{"a.*.com"}}, `egress: rule "a.*.com" is neither a CIDR, a host name nor *.domain`},
		{"star glued", policy.Egress{Allow: []string{"*example.com"}}, `egress: rule "*example.com" is neither`},
		{"empty label", policy.Egress{Allow: []string{"a..b"}}, `egress: rule "a..b" is neither a CIDR, a host name nor *.domain: a label is empty`},
		{"leading dot", policy.Egress{Allow: []string{".example.com"}}, "a label is empty"},
		{"two trailing dots", policy.Egress{Allow: []string{"example.com.."}}, "a label is empty"},
		{"underscore", policy.Egress{Allow: []string{"a_b.example.com"}}, `label "a_b" has "_", not a letter, digit or hyphen`},
		{"space", policy.Egress{Allow: []string{" example.com"}}, `label " example" has " "`},
		{"utf-8", policy.Egress{Allow: []string{"bücher.de"}}, `label "bücher" has`},
		{"hyphen start", policy.Egress{Allow: []string{"-a.com"}}, `label "-a" begins or ends with a hyphen`},
		{"hyphen end", policy.Egress{Allow: []string{"a-.com"}}, `label "a-" begins or ends with a hyphen`},
		{"long label", policy.Egress{Allow: []string{strings.Repeat("x", 64) + ".com"}}, "is longer than 63 bytes"},
		{"long name ok", policy.Egress{Allow: []string{long}}, ""},
		{"long name", policy.Egress{Allow: []string{tooLong}}, `egress: rule "abcdefghi.abcdefghi.abcdefghi.abcdefghi.abcdefghi.abcdefghi.abcdefghi.abcdefghi."...(303 bytes) is longer than 253 bytes`},
		{"254 bytes", policy.Egress{Allow: []string{strings.Repeat("a.", 126) + "co"}}, "the name is longer than 253 bytes"},
		{"numeric tld", policy.Egress{Allow: []string{"example.123"}}, "the last label is all digits"},
		{"bad v4", policy.Egress{Allow: []string{"256.1.1.1"}}, `egress: rule "256.1.1.1" is not a valid CIDR`},
		{"short v4", policy.Egress{Allow: []string{"10.1"}}, `egress: rule "10.1" is not a valid CIDR`},
		{"v4 /33", policy.Egress{Deny: []string{"10.0.0.0/33"}}, `egress: rule "10.0.0.0/33" is not a valid CIDR`},
		{"v6 /129", policy.Egress{Deny: []string{"2001:db8::/129"}}, `is not a valid CIDR`},
		{"no bits", policy.Egress{Deny: []string{"10.0.0.0/"}}, `is not a valid CIDR`},
		{"zone", policy.Egress{Deny: []string{"fe80::1%eth0"}}, `is not a valid CIDR (an address with a zone`},
		{"port", policy.Egress{Allow: []string{"example.com:443"}}, `egress: rule "example.com:443" is not a valid CIDR`},
		{"url", policy.Egress{Allow: []string{"https://example.com"}}, `is not a valid CIDR`},
		{"too many", policy.Egress{Allow: many[:200], Deny: many[200:]}, "egress: 257 rules, more than the 256 a policy may hold"},
		{"as many as may be", policy.Egress{Allow: many[:200], Deny: many[200:256]}, ""},
		{"v4 ok", policy.Egress{Allow: []string{"10.0.0.0/8", "1.2.3.4", "0.0.0.0/0"}}, ""},
		{"v6 ok", policy.Egress{Allow: []string{"2001:db8::/32", "::1", "::/0", "::ffff:1.2.3.4"}}, ""},
		{"names ok", policy.Egress{Allow: []string{"Example.COM.", "*.npmjs.org", "*.com", "xn--bcher-kva.de", "a-b.c0m", "localhost"}}, ""},
		{"second bad rule quoted", policy.Egress{Allow: []string{"ok.com"}, Deny: []string{"ok.net", "bad!"}}, `rule "bad!"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := policy.Parse(tt.e)
			if tt.want == "" {
				if err != nil || r == nil {
					t.Fatalf("Parse: %v, want no error", err)
				}
				if err := tt.e.Check(); err != nil {
					t.Fatalf("Check: %v, want none", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Parse: no error, want one with %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Parse: %q, want it to hold %q", err, tt.want)
			}
			if r != nil {
				t.Fatalf("Parse returned rules with its error")
			}
			if len(err.Error()) > 300 {
				t.Fatalf("error of %d bytes: a hostile rule makes it long", len(err.Error()))
			}
			if cerr := tt.e.Check(); cerr == nil || cerr.Error() != err.Error() {
				t.Fatalf("Check: %v, want the error of Parse", cerr)
			}
		})
	}
}

func TestNameAllowed(t *testing.T) {
	allowAll := policy.Egress{Deny: []string{"evil.com", "*.tracker.net", "*.ads.example.org"}}
	denyAll := policy.Egress{
		Default: "deny",
		Allow:   []string{"*.npmjs.org", "github.com", "*.example.org", "pypi.org"},
		Deny:    []string{"bad.npmjs.org", "*.x.example.org", "pypi.org"},
	}
	tests := []struct {
		e       policy.Egress
		name    string
		allowed bool
		rule    string
	}{
		{allowAll, "example.com", true, ""},
		{allowAll, "evil.com", false, "evil.com"},
		{allowAll, "EVIL.com.", false, "evil.com"},
		{allowAll, "www.evil.com", true, ""}, // a name rule is that name only
		{allowAll, "tracker.net", true, ""},  // a wildcard covers names under it only
		{allowAll, "a.tracker.net", false, "*.tracker.net"},
		{allowAll, "a.b.c.TRACKER.net.", false, "*.tracker.net"},
		{allowAll, "nottracker.net", true, ""},
		{allowAll, "a.ads.example.org", false, "*.ads.example.org"},
		{allowAll, "", true, ""},
		{allowAll, ".", true, ""},

		{denyAll, "registry.npmjs.org", true, "*.npmjs.org"},
		{denyAll, "REGISTRY.npmjs.org.", true, "*.npmjs.org"},
		{denyAll, "npmjs.org", false, ""},
		{denyAll, "bad.npmjs.org", false, "bad.npmjs.org"}, // deny wins
		{denyAll, "a.bad.npmjs.org", true, "*.npmjs.org"},
		{denyAll, "github.com", true, "github.com"},
		{denyAll, "api.github.com", false, ""},
		{denyAll, "fakegithub.com", false, ""},
		{denyAll, "github.com.evil.net", false, ""},
		{denyAll, "pypi.org", false, "pypi.org"}, // in both: deny wins
		{denyAll, "a.example.org", true, "*.example.org"},
		{denyAll, "x.example.org", true, "*.example.org"},
		{denyAll, "a.x.example.org", false, "*.x.example.org"}, // the longest wildcard decides
		{denyAll, "_sip._tcp.a.example.org", true, "*.example.org"},
		{denyAll, "", false, ""},
		// Names that are not plain host names match no rule: the text
		// ends with ".example.org" but the labels are "a.example" and
		// "org".
		{denyAll, `a\.example.org`, false, ""},
		{denyAll, `a\046example.org`, false, ""},
		{denyAll, "a..example.org", false, ""},
		{denyAll, "a example.org", false, ""},
		{denyAll, strings.Repeat("a.", 130) + "example.org", false, ""},
		{allowAll, `a\.evil.com`, true, ""},
	}
	for _, tt := range tests {
		r := mustParse(t, tt.e)
		t.Run(fmt.Sprintf("%s/%s", tt.e.Default, tt.name), func(t *testing.T) {
			allowed, rule := r.NameAllowed(tt.name)
			if allowed != tt.allowed || rule != tt.rule {
				t.Fatalf("NameAllowed(%q) = %v, %q; want %v, %q", tt.name, allowed, rule, tt.allowed, tt.rule)
			}
		})
	}
}

func TestAddrAllowed(t *testing.T) {
	allowAll := policy.Egress{Deny: []string{"10.0.0.0/8", "192.0.2.7", "2001:db8::/32", "::ffff:198.51.100.0/120"}}
	denyAll := policy.Egress{
		Default: "deny",
		Allow:   []string{"10.0.0.0/8", "203.0.113.0/24", "2001:db8::/32", "::/0"},
		Deny:    []string{"10.1.0.0/16", "10.1.2.3/32", "2001:db8:1::/48"},
	}
	tests := []struct {
		e       policy.Egress
		addr    string
		allowed bool
		rule    string
	}{
		{allowAll, "1.1.1.1", true, ""},
		{allowAll, "10.9.9.9", false, "10.0.0.0/8"},
		{allowAll, "::ffff:10.9.9.9", false, "10.0.0.0/8"}, // mapped: as IPv4
		{allowAll, "192.0.2.7", false, "192.0.2.7"},
		{allowAll, "192.0.2.8", true, ""},
		{allowAll, "198.51.100.9", false, "::ffff:198.51.100.0/120"}, // a mapped rule is IPv4
		{allowAll, "2001:db8::1", false, "2001:db8::/32"},
		{allowAll, "2001:db9::1", true, ""},
		{allowAll, "fe80::1%eth0", true, ""},

		{denyAll, "10.9.9.9", true, "10.0.0.0/8"},
		{denyAll, "10.1.9.9", false, "10.1.0.0/16"},
		{denyAll, "10.1.2.3", false, "10.1.2.3/32"}, // the most specific rule is named
		{denyAll, "203.0.113.255", true, "203.0.113.0/24"},
		{denyAll, "203.0.114.0", false, ""},
		{denyAll, "::ffff:203.0.113.1", true, "203.0.113.0/24"},
		{denyAll, "::ffff:8.8.8.8", false, ""}, // ::/0 is IPv6 only
		{denyAll, "8.8.8.8", false, ""},
		{denyAll, "2001:db8:2::1", true, "2001:db8::/32"},
		{denyAll, "2001:db8:1::1", false, "2001:db8:1::/48"},
		{denyAll, "2606:4700::1", true, "::/0"},
	}
	for _, tt := range tests {
		r := mustParse(t, tt.e)
		t.Run(fmt.Sprintf("%s/%s", tt.e.Default, tt.addr), func(t *testing.T) {
			allowed, rule := r.AddrAllowed(netip.MustParseAddr(tt.addr))
			if allowed != tt.allowed || rule != tt.rule {
				t.Fatalf("AddrAllowed(%s) = %v, %q; want %v, %q", tt.addr, allowed, rule, tt.allowed, tt.rule)
			}
		})
	}
	if ok, _ := mustParse(t, allowAll).AddrAllowed(netip.Addr{}); ok {
		t.Errorf("AddrAllowed(zero address) = true, want false")
	}
}

// A nil *Rules is the zero policy.
func TestNilRules(t *testing.T) {
	var r *policy.Rules
	if ok, rule := r.NameAllowed("example.com"); !ok || rule != "" {
		t.Errorf("NameAllowed = %v, %q; want true, \"\"", ok, rule)
	}
	if ok, _ := r.AddrAllowed(netip.MustParseAddr("10.0.0.1")); !ok {
		t.Errorf("AddrAllowed = false, want true")
	}
	if r.DefaultDeny() {
		t.Errorf("DefaultDeny = true, want false")
	}
	if got := r.CIDRs(); !reflect.DeepEqual(got, policy.CIDRs{}) {
		t.Errorf("CIDRs = %+v, want none", got)
	}
}

func TestCIDRs(t *testing.T) {
	r := mustParse(t, policy.Egress{
		Default: "deny",
		Allow: []string{
			"10.1.0.0/16", "10.0.0.0/8", "10.2.3.4", // the /16 and /32 lie in the /8
			"192.0.2.9/24", "192.0.2.0/24", // the same, once masked
			"::ffff:198.51.100.0/120", "1.2.3.4",
			"2001:db8::/32", "2001:db8:1::/48", "::1",
			"example.com", "*.example.org", // names: no CIDR
		},
		Deny: []string{"10.1.2.3", "fd00::/8", "::ffff:0:0/96"},
	})
	got := r.CIDRs()
	p := netip.MustParsePrefix
	want := policy.CIDRs{
		Allow4: []netip.Prefix{p("1.2.3.4/32"), p("10.0.0.0/8"), p("192.0.2.0/24"), p("198.51.100.0/24")},
		Allow6: []netip.Prefix{p("::1/128"), p("2001:db8::/32")},
		Deny4:  []netip.Prefix{p("0.0.0.0/0")},
		Deny6:  []netip.Prefix{p("fd00::/8")},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("CIDRs() =\n%+v\nwant\n%+v", got, want)
	}
	if !r.DefaultDeny() {
		t.Fatalf("DefaultDeny = false, want true")
	}
}

// The policy travels in settings as JSON with lower-case keys, and an
// empty one is {}.
func TestEgressJSON(t *testing.T) {
	b, err := json.Marshal(policy.Egress{})
	if err != nil || string(b) != "{}" {
		t.Fatalf("Marshal(zero) = %s, %v; want {}", b, err)
	}
	in := `{"default":"deny","allow":["*.npmjs.org","10.0.0.0/8"],"deny":["bad.npmjs.org"]}`
	var e policy.Egress
	if err := json.Unmarshal([]byte(in), &e); err != nil {
		t.Fatal(err)
	}
	want := policy.Egress{Default: "deny", Allow: []string{"*.npmjs.org", "10.0.0.0/8"}, Deny: []string{"bad.npmjs.org"}}
	if !reflect.DeepEqual(e, want) {
		t.Fatalf("Unmarshal = %+v, want %+v", e, want)
	}
	out, err := json.Marshal(e)
	if err != nil || string(out) != in {
		t.Fatalf("Marshal = %s, %v; want %s", out, err, in)
	}
}

func TestNormalizeName(t *testing.T) {
	for in, want := range map[string]string{
		"Example.COM.": "example.com",
		"example.com":  "example.com",
		"":             "",
		".":            "",
		"ÄB.com":       "Äb.com", // bytes: only ASCII letters change
	} {
		if got := policy.NormalizeName(in); got != want {
			t.Errorf("NormalizeName(%q) = %q, want %q", in, got, want)
		}
	}
}

func ExampleRules_NameAllowed() {
	r, err := policy.Parse(policy.Egress{
		Default: policy.DefaultDeny,
		Allow:   []string{"*.npmjs.org"},
		Deny:    []string{"evil.npmjs.org"},
	})
	if err != nil {
		panic(err)
	}
	for _, name := range []string{"registry.npmjs.org.", "npmjs.org", "evil.npmjs.org"} {
		allowed, rule := r.NameAllowed(name)
		fmt.Printf("%s: %v %q\n", name, allowed, rule)
	}
	// Output:
	// registry.npmjs.org.: true "*.npmjs.org"
	// npmjs.org: false ""
	// evil.npmjs.org: false "evil.npmjs.org"
}
