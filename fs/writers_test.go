package fs

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestOpenWriterSeenElsewhere writes a file through one mount, keeping it
// open, while a second mount of the same folder stats it right before
// and right after each write: with caches kept for an hour, the size
// still shows at once, passed through or served by the daemon. The
// writer's own mount keeps caching (its kernel made the writes).
func TestOpenWriterSeenElsewhere(t *testing.T) {
	for _, c := range servingModes {
		t.Run(c.name, func(t *testing.T) {
			opts := c.opts
			opts.EntryTimeout, opts.AttrTimeout, opts.NegativeTimeout = time.Hour, time.Hour, time.Hour
			_, _, a, b, _ := sharedMountsWith(t, HubConfig{}, opts)

			must(t, os.WriteFile(filepath.Join(a, "f"), []byte("a"), 0o644))
			look := filepath.Join(b, "f")
			size := func(when string, want int) {
				t.Helper()
				fi, err := os.Stat(look)
				if err != nil {
					t.Fatalf("%s: %v", when, err)
				}
				if fi.Size() != int64(want) {
					t.Errorf("%s: b shows %d bytes, want %d", when, fi.Size(), want)
				}
			}
			// Wait until b shows what the write-and-close left, however
			// late the close's notice arrives; then b caches it.
			deadline := time.Now().Add(5 * time.Second)
			for fi, err := os.Stat(look); err != nil || fi.Size() != 1; fi, err = os.Stat(look) {
				if time.Now().After(deadline) {
					t.Fatalf("b never showed the file: %v, %v", fi, err)
				}
				time.Sleep(10 * time.Millisecond)
			}

			f, err := os.OpenFile(filepath.Join(a, "f"), os.O_WRONLY|os.O_APPEND, 0)
			must(t, err)
			defer f.Close()
			n := 1
			for i, chunk := range []string{"b", strings.Repeat("c", 70_000), "d"} {
				size("before write "+string(rune('0'+i)), n)
				if _, err := f.WriteString(chunk); err != nil {
					t.Fatal(err)
				}
				n += len(chunk)
				size("after write "+string(rune('0'+i)), n)
				size("again after write "+string(rune('0'+i)), n)
			}
			must(t, f.Close())
			size("after the close", n)
		})
	}
}

// TestChangeSeenLateHasItsWriter: writes passed through to a file still
// open are seen by the next request about the path, which may come
// before the handle's release tells them. The change is told with the
// actor that holds the file open for writing, not as nobody's.
func TestChangeSeenLateHasItsWriter(t *testing.T) {
	for _, c := range servingModes {
		t.Run(c.name, func(t *testing.T) {
			var mu sync.Mutex
			var changes []EntryChange
			opts := c.opts
			opts.OnChange = func(ch EntryChange) {
				mu.Lock()
				changes = append(changes, ch)
				mu.Unlock()
			}
			_, mnt := mountTemp(t, opts)
			p := filepath.Join(mnt, "f")
			must(t, os.WriteFile(p, []byte("a"), 0o644))
			w, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
			must(t, err)
			defer w.Close()
			for range 3 {
				if _, err := w.WriteString("more"); err != nil {
					t.Fatal(err)
				}
				// An open of the path while w is open: it sees the
				// writes w passed through.
				r, err := os.Open(p)
				must(t, err)
				r.Close()
			}
			must(t, w.Close())
			mu.Lock()
			defer mu.Unlock()
			var n int
			for _, ch := range changes {
				if ch.Kind != Changed {
					continue
				}
				n++
				if ch.Actor.Pid != os.Getpid() {
					t.Errorf("a change of %s told as %s's, want this process's (pid %d)", ch.Path, ch.Actor, os.Getpid())
				}
			}
			if n == 0 {
				t.Error("no change told")
			}
		})
	}
}
