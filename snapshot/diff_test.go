package snapshot

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestDiff(t *testing.T) {
	r := openRepo(t)
	a, b := t.TempDir(), t.TempDir()
	for _, dir := range []string{a, b} {
		write(t, filepath.Join(dir, "same"), "same", 0o644)
		write(t, filepath.Join(dir, "sub/same"), "same", 0o644)
	}
	write(t, filepath.Join(a, "content"), "old", 0o644)
	write(t, filepath.Join(b, "content"), "new", 0o644)
	write(t, filepath.Join(a, "mode"), "m", 0o644)
	write(t, filepath.Join(b, "mode"), "m", 0o755)
	write(t, filepath.Join(a, "removed"), "r", 0o644)
	write(t, filepath.Join(b, "added"), "a", 0o644)
	write(t, filepath.Join(a, "gone/x"), "x", 0o644)
	write(t, filepath.Join(a, "gone/y/z"), "z", 0o644)
	write(t, filepath.Join(b, "new/x"), "x", 0o644)
	write(t, filepath.Join(a, "kind"), "was a file", 0o644)
	write(t, filepath.Join(b, "kind/inside"), "now a folder", 0o644)
	write(t, filepath.Join(a, "kind.txt"), "sorts between kind and kind/inside by bytes", 0o644)
	write(t, filepath.Join(b, "kind.txt"), "and is listed after kind/inside", 0o644)
	os.Symlink("one", filepath.Join(a, "link"))
	os.Symlink("two", filepath.Join(b, "link"))
	os.Mkdir(filepath.Join(a, "dirmode"), 0o755)
	os.Mkdir(filepath.Join(b, "dirmode"), 0o700)
	write(t, filepath.Join(a, "sub/changed"), "1", 0o644)
	write(t, filepath.Join(b, "sub/changed"), "2", 0o644)
	ha, _ := build(t, r, a, Hash{}, nil, true)
	hb, _ := build(t, r, b, Hash{}, nil, true)

	deltas, err := r.Diff(context.Background(), ha, hb)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range deltas {
		got = append(got, fmt.Sprintf("%s %s", d.Op, d.Path))
	}
	want := []string{
		"added added",
		"modified content",
		"modified dirmode",
		"removed gone",
		"removed gone/x",
		"removed gone/y",
		"removed gone/y/z",
		"removed kind",
		"added kind",
		"added kind/inside",
		"modified kind.txt",
		"modified link",
		"modified mode",
		"added new",
		"added new/x",
		"removed removed",
		"modified sub/changed",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Diff:\ngot  %q\nwant %q", got, want)
	}
	for _, d := range deltas {
		switch {
		case d.Op == Added && (d.New.Kind == 0 || d.Old != Entry{}),
			d.Op == Removed && (d.Old.Kind == 0 || d.New != Entry{}),
			d.Op == Modified && (d.Old.Kind != d.New.Kind || d.Old == d.New):
			t.Errorf("%s %s: entries old %+v new %+v do not fit", d.Op, d.Path, d.Old, d.New)
		}
		if name := d.Old.Name + d.New.Name; !strings.HasSuffix(d.Path, d.Old.Name) || !strings.HasSuffix(d.Path, d.New.Name) || name == "" {
			t.Errorf("%s %s: entry names %q, %q", d.Op, d.Path, d.Old.Name, d.New.Name)
		}
	}
	if !slices.IsSortedFunc(deltas, func(x, y Delta) int { return ComparePaths(x.Path, y.Path) }) {
		t.Errorf("Diff is not sorted by ComparePaths")
	}

	// The reverse, and nothing between equal trees.
	back, err := r.Diff(context.Background(), hb, ha)
	if err != nil || len(back) != len(deltas) {
		t.Errorf("Diff(b, a): got %d deltas, %v; want %d", len(back), err, len(deltas))
	}
	if same, err := r.Diff(context.Background(), ha, ha); err != nil || len(same) != 0 {
		t.Errorf("Diff(a, a): got %v, %v; want none", same, err)
	}
	// Applying the diff to a copy of a makes b.
	dst := t.TempDir()
	restore(t, r, ha, dst)
	if _, err := r.Apply(context.Background(), deltas, newDirTarget(t, dst)); err != nil {
		t.Fatal(err)
	}
	sameDirs(t, dst, b)
}

func TestComparePaths(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"a", "a", 0},
		{"a", "b", -1},
		{"a/b", "a.txt", -1}, // a folder's content follows it
		{"a", "a/b", -1},
		{"a/b", "a", 1},
		{"a/b/c", "a/b.c", -1},
		{"b", "a/z", 1},
	} {
		if got := ComparePaths(tc.a, tc.b); got != tc.want {
			t.Errorf("ComparePaths(%q, %q): got %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestTextDiff(t *testing.T) {
	r := openRepo(t)
	a, b := t.TempDir(), t.TempDir()
	write(t, filepath.Join(a, "f.txt"), "one\ntwo\nthree\nfour\nfive\n", 0o644)
	write(t, filepath.Join(b, "f.txt"), "one\ntwo\nTHREE\nfour\nfive\n", 0o644)
	write(t, filepath.Join(a, "bin"), "text\x00with a NUL", 0o644)
	write(t, filepath.Join(b, "bin"), "text\x00with another NUL", 0o644)
	write(t, filepath.Join(b, "latin1"), "caf\xe9\n", 0o644)
	write(t, filepath.Join(b, "new.txt"), "hello\nworld", 0o644)
	write(t, filepath.Join(b, "huge"), strings.Repeat("x\n", maxTextDiff/2+1), 0o644)
	ha, _ := build(t, r, a, Hash{}, nil, true)
	hb, _ := build(t, r, b, Hash{}, nil, true)
	deltas, err := r.Diff(context.Background(), ha, hb)
	if err != nil {
		t.Fatal(err)
	}
	byPath := make(map[string]Delta)
	for _, d := range deltas {
		byPath[d.Path] = d
	}
	for _, tc := range []struct {
		path     string
		context  int
		want     string
		wantText bool
	}{
		{"f.txt", 1, "--- a/f.txt\n+++ b/f.txt\n@@ -2,3 +2,3 @@\n two\n-three\n+THREE\n four\n", true},
		{"new.txt", 3, "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1,2 @@\n+hello\n+world\n\\ No newline at end of file\n", true},
		{"bin", 3, "", false},
		{"latin1", 3, "", false},
		{"huge", 3, "", false},
	} {
		t.Run(tc.path, func(t *testing.T) {
			d, ok := byPath[tc.path]
			if !ok {
				t.Fatalf("no delta for %s in %v", tc.path, deltas)
			}
			got, text, err := r.TextDiff(context.Background(), d, tc.context)
			if err != nil {
				t.Fatal(err)
			}
			if text != tc.wantText || got != tc.want {
				t.Errorf("got %v:\n%s\nwant %v:\n%s", text, got, tc.wantText, tc.want)
			}
		})
	}
}
