package gateway

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"warren/api"
)

// TestEventLogGroupCommit: events added from many goroutines at once are
// all written, each once and in seq order, whether the writer batches
// them or a flush writes them out; the file is rewritten with the newest
// max once it holds twice that; and a log opened again keeps the newest
// max.
func TestEventLogGroupCommit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.log")
	const max = 100
	l, err := openEventLog(path, max)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex // publish numbers under the broker's lock: so here
	var seq uint64
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 250 {
				mu.Lock()
				seq++
				n := seq
				if err := l.add(api.Event{Seq: n, Type: api.EventThreadBound}); err != nil {
					t.Error(err)
				}
				mu.Unlock()
				if n%17 == 0 {
					l.flush() // a stream writing the log out
				}
			}
		}()
	}
	wg.Wait()
	l.flush()
	// What the file holds now: a rewrite's max, then appended lines, at
	// most twice max, every seq once and in order, ending with the last.
	lines := fileSeqs(t, path)
	if len(lines) < max || len(lines) >= 2*max+1 {
		t.Errorf("the file holds %d events, want between %d and %d", len(lines), max, 2*max)
	}
	for i := 1; i < len(lines); i++ {
		if lines[i] != lines[i-1]+1 {
			t.Fatalf("seq %d follows %d in the file", lines[i], lines[i-1])
		}
	}
	if last := lines[len(lines)-1]; last != 1000 {
		t.Errorf("the file ends at seq %d, want 1000", last)
	}
	if err := l.close(); err != nil {
		t.Fatal(err)
	}
	if err := l.close(); err != nil {
		t.Fatalf("a second close: %v", err)
	}
	again, err := openEventLog(path, max)
	if err != nil {
		t.Fatal(err)
	}
	defer again.close()
	if again.oldest() != 1000-max+1 || again.last() != 1000 {
		t.Errorf("opened again: seqs %d to %d, want %d to 1000", again.oldest(), again.last(), 1000-max+1)
	}
}

// fileSeqs reads the seqs of the log file's lines.
func fileSeqs(t *testing.T, path string) []uint64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var seqs []uint64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var ev api.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		seqs = append(seqs, ev.Seq)
	}
	return seqs
}
