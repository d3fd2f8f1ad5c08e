package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkMove is the figure of a thread that moves (bench/move.sh, in
// make bench; not a test): the time from the takeover to the first
// command on the new server, for a workspace of moveFiles files, against
// a git clone of the same tree from a bare repository on the same disk
// (file://, so the clone packs and unpacks as a clone from a mirror
// does). Each thread has content of its own, so that no move finds the
// objects of another in the new server's repository. Run it with
// -benchtime 1x: it measures its moves once, and prints its figures.
func BenchmarkMove(b *testing.B) {
	threads := envInt(b, "BENCH_MOVE_THREADS", 5)
	files := envInt(b, "BENCH_MOVE_FILES", 12000)
	c := newMoveCluster(b)
	a := c.mover("host-a", "bench")
	bb := c.mover("host-b", "bench")
	work := b.TempDir()

	var clones []time.Duration
	names := make([]string, threads)
	roots := make([]string, threads)
	for i := range threads {
		names[i] = fmt.Sprintf("move-%d", i)
		mp := a.bind("default", names[i])
		// The tree, written once in a folder of its own for git, once in
		// the workspace.
		src := filepath.Join(work, names[i])
		writeTree(b, src, files, i)
		writeTree(b, mp, files, i)
		a.mustWarren("checkpoint", "--thread", names[i])
		roots[i] = a.threadInfo(names[i]).Root
		bare := src + ".git"
		git(b, src, "init", "-q", "-b", "main")
		git(b, src, "add", "-A")
		git(b, src, "-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit", "-q", "-m", "tree")
		git(b, work, "clone", "-q", "--bare", src, bare)
		start := time.Now()
		git(b, work, "clone", "-q", "file://"+bare, src+".clone")
		clones = append(clones, time.Since(start))
	}
	for _, n := range names {
		waitCopied(b, a, n)
	}
	loseDisk(b, a)

	var moves []time.Duration
	cl := bb.client()
	for i, n := range names {
		pinned := pinnedMessage(roots[i], "host-a")
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
			start := time.Now()
			out, code, err := execAPI(cl, 5*time.Minute, n, "ls | wc -l")
			took := time.Since(start)
			if e := apiError(err); e != nil && e.Code == "pinned" && strings.Contains(e.Message, pinned) || e != nil && e.Status == 503 {
				if time.Now().After(deadline) {
					b.Fatalf("%s still refused after a minute: %v", n, err)
				}
				continue
			}
			if err != nil || code != 0 || strings.TrimSpace(out) != strconv.Itoa(files/100) {
				b.Fatalf("the first command on B of %s: exit %d, %q, %v", n, code, out, err)
			}
			moves = append(moves, took)
			break
		}
	}
	// What the fetch took of it, as B logs it.
	var fetches []time.Duration
	for _, line := range strings.Split(bb.allLogs(), "\n") {
		if _, rest, ok := strings.Cut(line, "fetched a tree from the snapshot store"); ok {
			if _, v, ok := strings.Cut(rest, "took="); ok {
				if d, err := time.ParseDuration(strings.Fields(v)[0]); err == nil {
					fetches = append(fetches, d)
				}
			}
		}
	}
	mc, mm := median(clones), median(moves)
	fmt.Printf("a thread moving to another server: %d threads of %d files each, medians\n", threads, files)
	fmt.Printf("%-58s %14s %14s %9s\n", "", "git clone", "warren move", "ratio")
	fmt.Printf("%-58s %14v %14v %8.2fx\n", "takeover to the first command / clone of the same tree", mc.Round(time.Millisecond), mm.Round(time.Millisecond), float64(mm)/float64(mc))
	if len(fetches) > 0 {
		fmt.Printf("  of which the fetch from the store: %v (median; the rest is the takeover, the restore of the files and the command)\n", median(fetches).Round(time.Millisecond))
	}
	fmt.Printf("  samples, git clone:   %v\n  samples, warren move: %v\n", rounded(clones), rounded(moves))
}

// writeTree writes files files in dir, files/100 folders of 100, a few
// hundred bytes each, their content made of the tree's seed (the
// folders are what `ls | wc -l` counts).
func writeTree(b testing.TB, dir string, files, seed int) {
	b.Helper()
	for i := range files {
		d := filepath.Join(dir, fmt.Sprintf("pkg%03d", i/100))
		if i%100 == 0 {
			must(b, os.MkdirAll(d, 0o755))
		}
		body := strings.Repeat(fmt.Sprintf("// tree %d, file %d: some source text\n", seed, i), 8)
		must(b, os.WriteFile(filepath.Join(d, fmt.Sprintf("f%03d.go", i%100)), []byte(body), 0o644))
	}
}

func git(b testing.TB, dir string, args ...string) {
	b.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func envInt(b testing.TB, name string, def int) int {
	b.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func rounded(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}
