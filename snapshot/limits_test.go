package snapshot

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// TestBuildLimits lowers each of the limits of a Build and checks that a
// workspace past it fails with an error naming the limit and its value,
// leaving nothing written, while one within passes.
func TestBuildLimits(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits Limits
		make   func(dir string)
		max    int64
	}{
		{"entries", Limits{Entries: 10}, func(dir string) {
			for i := range 11 {
				write(t, filepath.Join(dir, fmt.Sprintf("f%02d", i)), fmt.Sprint(i), 0o644)
			}
		}, 10},
		{"depth", Limits{Depth: 3}, func(dir string) {
			write(t, filepath.Join(dir, "a/b/c/d/file"), "deep", 0o644)
		}, 3},
		{"bytes", Limits{Bytes: 3000}, func(dir string) {
			write(t, filepath.Join(dir, "one"), strings.Repeat("x", 2000), 0o644)
			write(t, filepath.Join(dir, "two"), strings.Repeat("y", 2000), 0o644)
		}, 3000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := openRepo(t, WithLimits(tc.limits))
			ok := t.TempDir()
			write(t, filepath.Join(ok, "a/b/small"), "within every limit", 0o644)
			if _, _, err := r.Build(context.Background(), openRoot(t, ok), Hash{}, nil, true); err != nil {
				t.Fatalf("a workspace within the limits: %v", err)
			}
			spreadAll(t, r)
			before := len(objectFiles(t, r))

			dir := t.TempDir()
			tc.make(dir)
			_, _, err := r.Build(context.Background(), openRoot(t, dir), Hash{}, nil, true)
			var le *LimitError
			if !errors.Is(err, ErrLimit) || !errors.As(err, &le) || le.Limit != tc.name || le.Max != tc.max {
				t.Fatalf("Build past the %s limit: got %v, want a LimitError{%s, %d}", tc.name, err, tc.name, tc.max)
			}
			if !strings.Contains(err.Error(), fmt.Sprint(tc.max)) {
				t.Errorf("the error %q does not say the limit's value", err)
			}
			if logs := logsIn(t, r.Dir()); len(logs) != 0 {
				t.Errorf("a refused build left logs %v", logs)
			}
			if n := len(objectFiles(t, r)); n != before {
				t.Errorf("a refused build left objects: %d, want %d", n, before)
			}
		})
	}
	// An incremental build counts what it looks at, not what the tree
	// holds: a change of one file passes a limit the whole tree is past.
	r := openRepo(t, WithLimits(Limits{Entries: 12}))
	dir := t.TempDir()
	for i := range 10 {
		write(t, filepath.Join(dir, fmt.Sprintf("f%02d", i)), fmt.Sprint(i), 0o644)
	}
	base, _ := build(t, r, dir, Hash{}, nil, true)
	for i := 10; i < 20; i++ {
		write(t, filepath.Join(dir, fmt.Sprintf("f%02d", i)), fmt.Sprint(i), 0o644)
	}
	var changes []Change
	for i := 10; i < 20; i++ {
		changes = append(changes, Change{Path: fmt.Sprintf("f%02d", i)})
	}
	build(t, r, dir, base, changes, false)
	if _, _, err := r.Build(context.Background(), openRoot(t, dir), Hash{}, nil, true); !errors.Is(err, ErrLimit) {
		t.Errorf("a full build of 20 entries past a limit of 12: got %v, want ErrLimit", err)
	}
}
