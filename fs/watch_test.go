package fs

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// TestChangesToldWithTheirPaths: a change through the mount is told with
// the entry's whole path from the root, "/"-separated, a rename with both
// of its paths, also in a tree deeper than slashPath keeps on its stack.
func TestChangesToldWithTheirPaths(t *testing.T) {
	var mu sync.Mutex
	var told []string
	opts := Options{OnChange: func(c EntryChange) {
		mu.Lock()
		defer mu.Unlock()
		if c.Kind == Changed {
			return // which follow a creation is the kernel's timing
		}
		line := string(c.Kind) + " " + c.Path
		if c.From != "" {
			line = string(c.Kind) + " " + c.From + " -> " + c.Path
		}
		told = append(told, line)
	}}
	_, mnt := mountTemp(t, opts)

	deep := make([]string, 40)
	for i := range deep {
		deep[i] = "d" + strings.Repeat("x", i%3)
	}
	var want []string
	for i := range deep {
		must(t, os.Mkdir(filepath.Join(append([]string{mnt}, deep[:i+1]...)...), 0o755))
		want = append(want, "created /"+strings.Join(deep[:i+1], "/"))
	}
	dir := "/" + strings.Join(deep, "/")
	must(t, os.WriteFile(filepath.Join(mnt, dir, "f"), []byte("x"), 0o644))
	must(t, os.Rename(filepath.Join(mnt, dir, "f"), filepath.Join(mnt, deep[0], "g")))
	must(t, os.Remove(filepath.Join(mnt, deep[0], "g")))
	want = append(want,
		"created "+dir+"/f",
		"renamed "+dir+"/f -> /"+deep[0]+"/g",
		"removed /"+deep[0]+"/g")

	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(told, want) {
		t.Errorf("told:\n%s\nwant:\n%s", strings.Join(told, "\n"), strings.Join(want, "\n"))
	}
}
