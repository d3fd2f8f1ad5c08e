package cli

import (
	"os"
	"testing"
)

func TestParseCPU(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int // -1: refused
	}{
		{"0.5", 500}, {"2", 2000}, {".25", 250}, {"1.125", 1125}, {"0.01", 10}, {"0", 0},
		{"500m", 500}, {"10m", 10}, {"1000000m", 1000000},
		{"0.0005", -1}, {"-1", -1}, {"+1", -1}, {"1e3", -1}, {"", -1}, {".", -1}, {"m", -1},
		{"1.5m", -1}, {"x", -1}, {"1,5", -1}, {"9999999", -1}, {"1234567890m", -1},
	} {
		got, err := ParseCPU(c.in)
		if c.want < 0 {
			if err == nil {
				t.Errorf("ParseCPU(%q) = %d, want refused", c.in, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("ParseCPU(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
}

func TestDefaultDataDir(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	got := DefaultDataDir(env(map[string]string{"XDG_STATE_HOME": "/st", "HOME": "/h"}))
	want := "/st/warren"
	if os.Geteuid() == 0 {
		want = "/var/lib/warren"
	}
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
