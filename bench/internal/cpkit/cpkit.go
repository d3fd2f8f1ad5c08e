// Package cpkit is what the checkpoint benchmarks share (bench/cpbench,
// bench/snapbench): the workspace of many small files, the wait for a
// repository's background work, and the statistics they print.
package cpkit

import (
	"errors"
	"fmt"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// MakeTree makes n small files in dir, 100 to a folder, two levels deep
// (dNNN/eNN/fNNNNN.txt), and returns their paths. Each file holds 1 to 40
// lines naming it; with a salt, the lines name the salt too, so that trees
// of different salts share no content (no object of one is another's).
func MakeTree(dir string, n int, salt string) []string {
	var paths []string
	for i := range n {
		p := fmt.Sprintf("d%03d/e%02d/f%05d.txt", i/1000, i/100%10, i)
		full := filepath.Join(dir, p)
		if i%100 == 0 {
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				log.Fatal(err)
			}
		}
		line := fmt.Sprintf("line of file %d\n", i)
		if salt != "" {
			line = fmt.Sprintf("line of file %d of %s\n", i, salt)
		}
		if err := os.WriteFile(full, []byte(strings.Repeat(line, 1+i%40)), 0o644); err != nil {
			log.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths
}

// AppendTo appends s to the file at path.
func AppendTo(path, s string) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		log.Fatal(err)
	}
	if err := f.Close(); err != nil {
		log.Fatal(err)
	}
}

// WaitSpread waits until the repository at repo has no build log left
// in tmp/: the objects of the checkpoints taken so far are spread (placed
// loose and made durable) by the daemon's background spreader. A timed
// checkpoint then pays for its own work only, not for the writeback of
// the one before (which, on the same disk, every fsync would wait for).
// It returns how long it waited; with repo "", or before the
// repository's first checkpoint, it does not wait.
func WaitSpread(repo string) time.Duration {
	if repo == "" {
		return 0
	}
	start := time.Now()
	for {
		names, err := os.ReadDir(filepath.Join(repo, "tmp"))
		if errors.Is(err, fs.ErrNotExist) {
			return time.Since(start) // no checkpoint yet: nothing to spread
		}
		if err != nil {
			log.Fatalf("wait for the spreader: %v", err)
		}
		busy := false
		for _, n := range names {
			if strings.HasPrefix(n.Name(), "log-") {
				busy = true
				break
			}
		}
		if !busy {
			return time.Since(start)
		}
		if time.Since(start) > 10*time.Minute {
			log.Fatalf("wait for the spreader: logs still in %s/tmp after 10 minutes", repo)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stats returns the median, 10th and 90th percentiles, to the
// microsecond.
func Stats(ds []time.Duration) (median, p10, p90 time.Duration) {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	at := func(q float64) time.Duration { return s[int(q*float64(len(s)-1)+0.5)].Round(time.Microsecond) }
	return at(0.5), at(0.1), at(0.9)
}

// Ratio is a over b.
func Ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }

// Verdict says MET or MISSED.
func Verdict(ok bool) string {
	if ok {
		return "MET"
	}
	return "MISSED"
}
