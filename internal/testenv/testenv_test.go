package testenv

import (
	"slices"
	"testing"
)

func TestMountsUnderRoot(t *testing.T) {
	// One reading of the table: other tests' mounts come and go
	// meanwhile (go test runs packages side by side).
	table := Mounts(t)
	got := pathsUnder(table, "/")
	if len(got) == 0 {
		t.Fatal(`MountsUnder("/") is empty`)
	}
	if i := slices.IndexFunc(got, func(p string) bool { return p == "" || p[0] != '/' }); i >= 0 {
		t.Errorf(`MountsUnder("/") lists %q, not an absolute path`, got[i])
	}
	if n := len(table); len(got) != n {
		t.Errorf(`MountsUnder("/") lists %d mounts, the table has %d`, len(got), n)
	}
}
