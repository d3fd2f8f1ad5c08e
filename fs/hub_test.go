package fs

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"warren/internal/testenv"
)

// TestHubTwoMounts serves one folder twice with long cache timeouts. With
// a hub, what one mount changes shows through the other at once; without
// one, the second mount's caches would hide it for a minute.
func TestHubTwoMounts(t *testing.T) {
	testenv.RequireRootFUSE(t)
	long := Options{EntryTimeout: time.Minute, AttrTimeout: time.Minute, NegativeTimeout: time.Minute}
	for _, c := range []struct {
		name    string
		withHub bool
	}{{"hub", true}, {"no hub", false}} {
		t.Run(c.name, func(t *testing.T) {
			opts := long
			if c.withHub {
				hub := NewHub(HubConfig{})
				t.Cleanup(hub.Close)
				opts.Hub = hub
			}
			backing, a := mountTemp(t, opts)
			b := filepath.Join(t.TempDir(), "b")
			must(t, os.Mkdir(b, 0o755))
			mb, err := serveTest(context.Background(), backing, b, opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { mb.Close() })

			must(t, os.WriteFile(filepath.Join(a, "f"), []byte("old"), 0o644))
			// b caches the name, the size and the missing name "g".
			if got, err := os.ReadFile(filepath.Join(b, "f")); err != nil || string(got) != "old" {
				t.Fatalf("b reads %q, %v; want old", got, err)
			}
			if _, err := os.Stat(filepath.Join(b, "g")); !os.IsNotExist(err) {
				t.Fatalf("g exists before it was made: %v", err)
			}
			if names := listNames(t, b); names != "f" {
				t.Fatalf("b lists %q before g was made, want f", names)
			}
			must(t, os.WriteFile(filepath.Join(a, "f"), []byte("newer content"), 0o644))
			must(t, os.WriteFile(filepath.Join(a, "g"), []byte("g"), 0o644))

			stale := false
			deadline := time.Now().Add(2 * time.Second)
			for {
				got, err := os.ReadFile(filepath.Join(b, "f"))
				_, gerr := os.Stat(filepath.Join(b, "g"))
				if err == nil && string(got) == "newer content" && gerr == nil && listNames(t, b) == "f g" {
					break
				}
				if time.Now().After(deadline) {
					stale = true
					t.Logf("b still shows f=%q (%v), g: %v", got, err, gerr)
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if c.withHub && stale {
				t.Errorf("with a hub, b did not see a's changes")
			}
			if !c.withHub && !stale {
				t.Errorf("without a hub, b saw a's changes at once: this test cannot tell the hub works")
			}
		})
	}
}

// listNames lists dir's entries, sorted and joined by spaces.
func listNames(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("list %s: %v", dir, err)
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return strings.Join(names, " ")
}

// TestHubCloseWaitsForItsGoroutines holds the sweeper in the middle of a
// sweep while one Close runs and more Closes come: none may return while
// the sweeper runs (a second Close used to wait only for delivery), and
// all return once it ended. synctest tells, without a sleep, that every
// Close is blocked rather than slow, and fails the test if any goroutine
// of the hub is left at its end.
func TestHubCloseWaitsForItsGoroutines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		entered, release := make(chan struct{}), make(chan struct{})
		h := makeHub(HubConfig{}, 1<<20, 0)
		h.onSweep = func() {
			select {
			case entered <- struct{}{}:
				<-release
			default: // a later sweep, after the test let go
			}
		}
		h.start()
		<-entered // the sweeper is in a sweep

		var returned atomic.Int32
		closeHub := func() {
			h.Close()
			returned.Add(1)
		}
		go closeHub()
		synctest.Wait() // the first Close has stopped what it could
		const more = 3
		for range more {
			go closeHub()
		}
		synctest.Wait()
		if n := returned.Load(); n != 0 {
			t.Errorf("%d Close calls returned while the sweeper still ran", n)
		}
		close(release)
		h.Close()
		synctest.Wait() // the others are on their way out
		if n := returned.Load(); n != more+1 {
			t.Errorf("%d of %d Close calls returned", n, more+1)
		}
		for name, ch := range map[string]chan struct{}{"delivery": h.done, "sweeper": h.swept, "evictor": h.evicted} {
			select {
			case <-ch:
			default:
				t.Errorf("Close returned before the %s ended", name)
			}
		}
	})
}
