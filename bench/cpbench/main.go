// Command cpbench measures what a checkpoint costs, side by side in one
// run with what git, the peers' usual way, costs for the same tree:
//
//   - ten files changed in a workspace of 100,000 files: warren's
//     checkpoint (POST .../checkpoints, the answer read whole) against
//     `git add -A && git commit` in a repository of the same tree with the
//     same ten changes. The targets: at most 20 ms, and at most 1/20 of
//     git's time;
//   - everything changed: a tree untarred into an empty workspace, then
//     checkpointed, against the same untar into an empty repository, then
//     added and committed;
//   - the first checkpoint of the big workspace, which reads it whole, for
//     reference;
//   - a 20 GiB sparse file with 1 MiB of data: a checkpoint and a restore
//     (a revert) of it, their time and the bytes the daemon read, against
//     cp --sparse=always of the same file natively (sparse.go). Target:
//     under a second each, the restored file as sparse as the original.
//
// It prints medians and the ratios. bench/checkpoint.sh starts the daemon
// and runs this.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"warren/api"
	"warren/bench/internal/cpkit"
	"warren/client"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("cpbench: ")
	socket := flag.String("socket", "", "the daemon's socket (required)")
	work := flag.String("work", "", "a folder for the git repositories, on the disk under test (required)")
	files := flag.Int("files", 100_000, "files in the big workspace")
	changed := flag.Int("changed", 10, "files changed before each timed checkpoint")
	runs := flag.Int("runs", 9, "timed runs of the small-change measure")
	tarball := flag.String("tar", "", "a tarball to untar for the everything-changed measure; empty to skip")
	tarRuns := flag.Int("tar-runs", 3, "timed runs of the everything-changed measure")
	sparseRuns := flag.Int("sparse-runs", 3, "timed runs of the sparse-file measure; 0 to skip")
	daemon := flag.Int("pid", 0, "the daemon's pid, to count the bytes it reads; 0 not to count")
	rewrites := flag.Int("rewrites", 40, "rewrites of a big file, each checkpointed, by a thread with a snapshot quota; 0 to skip")
	rewriteMiB := flag.Int("rewrite-mib", 50, "MiB of each rewrite")
	quotaMiB := flag.Int("snapshot-quota-mib", 256, "the rewriting thread's snapshot quota, in MiB")
	repo := flag.String("repo", "", "the tenant bench's snapshot repository (DATA/snapshots/bench), to wait for its background work; empty not to wait")
	flag.Parse()
	if *socket == "" || *work == "" {
		log.Fatal("-socket and -work are required")
	}
	ctx := context.Background()
	c := client.New(*socket)
	defer c.CloseIdleConnections()

	// The big workspace, and the same tree in a git repository.
	bound, err := c.Bind(ctx, "bench", "big")
	if err != nil {
		log.Fatalf("bind: %v", err)
	}
	mnt := bound.MountPath
	gitDir := filepath.Join(*work, "git-big")
	log.Printf("making %d files in the workspace and in %s", *files, gitDir)
	paths := cpkit.MakeTree(mnt, *files, "")
	cpkit.MakeTree(gitDir, *files, "")
	git(gitDir, "init", "-q")
	git(gitDir, "add", "-A")
	git(gitDir, "commit", "-q", "-m", "base")

	first := time.Now()
	cp, err := c.History().Checkpoint(ctx, "bench", "big", api.CheckpointRequest{Label: "base"})
	if err != nil {
		log.Fatalf("first checkpoint: %v", err)
	}
	firstTook := time.Since(first)
	log.Printf("first checkpoint %s: %v, read %d files (whole: %v)", cp.Checkpoint.ID, firstTook, cp.Cost.Read, cp.Cost.Full)
	spreadTook := cpkit.WaitSpread(*repo)
	log.Printf("its objects spread in the background in %v more", spreadTook.Round(time.Millisecond))

	rng := rand.New(rand.NewPCG(1, 2))
	var warren, gits []time.Duration
	var reads []int64
	var builds []time.Duration // the daemon's own account: the tree built and stored
	for r := range *runs {
		for range *changed {
			p := paths[rng.IntN(len(paths))]
			line := fmt.Sprintf("change %d\n", r)
			cpkit.AppendTo(filepath.Join(mnt, p), line)
			cpkit.AppendTo(filepath.Join(gitDir, p), line)
		}
		// Take turns at going first. Each starts with nothing of the
		// other's dirty data left to write back: on ext4 an fsync waits
		// for the journal's commit, which carries every file's pending
		// data, so a checkpoint right after a commit of git's 100,000-entry
		// index pays for git's writes (and git for the spreader's).
		do := []func(){
			func() {
				cpkit.WaitSpread(*repo)
				syscall.Sync()
				start := time.Now()
				cp, err := c.History().Checkpoint(ctx, "bench", "big", api.CheckpointRequest{Label: fmt.Sprint("run ", r)})
				if err != nil {
					log.Fatalf("checkpoint: %v", err)
				}
				warren = append(warren, time.Since(start))
				reads = append(reads, cp.Cost.Read)
				builds = append(builds, time.Duration(cp.Cost.Millis*float64(time.Millisecond)))
			},
			func() {
				syscall.Sync()
				start := time.Now()
				gitShell(gitDir, "git add -A && git commit -q -m run")
				gits = append(gits, time.Since(start))
			},
		}
		if r%2 == 1 {
			do[0], do[1] = do[1], do[0]
		}
		do[0]()
		do[1]()
	}

	var wTar, gTar []time.Duration
	if *tarball != "" {
		for r := range *tarRuns {
			thread := fmt.Sprint("untar-", r)
			b, err := c.Bind(ctx, "bench", thread)
			if err != nil {
				log.Fatalf("bind: %v", err)
			}
			if _, err := c.History().Checkpoint(ctx, "bench", thread, api.CheckpointRequest{Label: "empty"}); err != nil {
				log.Fatalf("checkpoint: %v", err)
			}
			run("tar", "-C", b.MountPath, "-xf", *tarball)
			dir := filepath.Join(*work, thread)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				log.Fatal(err)
			}
			git(dir, "init", "-q")
			run("tar", "-C", dir, "-xf", *tarball)
			run("sync")
			do := []func(){
				func() {
					cpkit.WaitSpread(*repo)
					syscall.Sync()
					start := time.Now()
					if _, err := c.History().Checkpoint(ctx, "bench", thread, api.CheckpointRequest{Label: "untarred"}); err != nil {
						log.Fatalf("checkpoint: %v", err)
					}
					wTar = append(wTar, time.Since(start))
				},
				func() {
					syscall.Sync()
					start := time.Now()
					gitShell(dir, "git add -A && git commit -q -m untar")
					gTar = append(gTar, time.Since(start))
				},
			}
			if r%2 == 1 {
				do[0], do[1] = do[1], do[0]
			}
			do[0]()
			do[1]()
			if err := c.DeleteThread(ctx, "bench", thread); err != nil {
				log.Fatalf("delete: %v", err)
			}
			os.RemoveAll(dir)
		}
	}

	var sparseCp, sparseRestore, sparseNative sparseResult
	if *sparseRuns > 0 {
		sparseCp, sparseRestore, sparseNative = sparseMeasure(ctx, c, *work, *repo, *daemon, *sparseRuns)
	}

	fmt.Printf("%-44s %12s %12s %12s   (%d runs)\n", "checkpoint", "median", "p10", "p90", *runs)
	row := func(name string, ds []time.Duration) time.Duration {
		m, p10, p90 := cpkit.Stats(ds)
		fmt.Printf("%-44s %12v %12v %12v\n", name, m, p10, p90)
		return m
	}
	wm := row(fmt.Sprintf("warren, %d of %d files changed", *changed, *files), warren)
	row("  of which the daemon's build (cost.millis)", builds)
	gm := row(fmt.Sprintf("git add -A && commit, the same %d changed", *changed), gits)
	fmt.Printf("%-44s %12v   (whole workspace read, %d files)\n", "warren, first checkpoint", firstTook.Round(time.Microsecond), cp.Cost.Read)
	if *repo != "" {
		fmt.Printf("%-44s %12v   (in the background, after it answered)\n", "  its objects spread", spreadTook.Round(time.Millisecond))
	}
	var wt, gt time.Duration
	if len(wTar) > 0 {
		fmt.Println()
		fmt.Printf("%-44s %12s %12s %12s   (%d runs)\n", "everything changed (an untar)", "median", "p10", "p90", *tarRuns)
		wt = row("warren, checkpoint after the untar", wTar)
		gt = row("git add -A && commit after the untar", gTar)
	}
	sort.Slice(reads, func(i, j int) bool { return reads[i] < reads[j] })
	fmt.Println()
	fmt.Printf("warren checkpoint, %d changed: %v (target <= 20ms): %s\n", *changed, wm, cpkit.Verdict(wm <= 20*time.Millisecond))
	fmt.Printf("warren / git, %d changed:     %.3fx (target <= 0.050x): %s\n", *changed, cpkit.Ratio(wm, gm), cpkit.Verdict(cpkit.Ratio(wm, gm) <= 0.05))
	fmt.Printf("files read per checkpoint:    %d to %d (of %d)\n", reads[0], reads[len(reads)-1], *files)
	if len(wTar) > 0 {
		fmt.Printf("warren / git, untar:          %.3fx\n", cpkit.Ratio(wt, gt))
	}
	if *sparseRuns > 0 {
		printSparse(sparseCp, sparseRestore, sparseNative, *sparseRuns)
	}
	if *rewrites > 0 {
		quotaMeasure(ctx, c, *rewrites, *rewriteMiB, *quotaMiB)
	}
}

// git runs git in dir, with no user or system configuration.
func git(dir string, args ...string) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = gitEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		log.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func gitShell(dir, script string) {
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = dir
	cmd.Env = gitEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		log.Fatalf("%s: %v: %s", script, err, out)
	}
}

func gitEnv() []string {
	return append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "LC_ALL=C",
		"GIT_AUTHOR_NAME=bench", "GIT_AUTHOR_EMAIL=bench@localhost", "GIT_COMMITTER_NAME=bench", "GIT_COMMITTER_EMAIL=bench@localhost")
}

func run(name string, args ...string) {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		log.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}
