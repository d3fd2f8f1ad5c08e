// Command snapbench measures what the snapshot store costs (issue 35:
// serve --snapshots s3://..., the checkpoints copied to an S3-compatible
// store in the background), side by side in one run with a daemon that
// keeps them in its local folder only:
//
//   - checkpoint latency: a workspace of 100,000 files, ten of them
//     changed, then POST .../checkpoints, the answer read whole, on both
//     daemons in turn. Target: at most 20 ms with the store too, as
//     without it;
//   - replication lag: from the checkpoint's answer to its replicated:
//     true in GET .../checkpoints, for each of those ten-file checkpoints
//     (each after the one before was replicated) and for first
//     checkpoints of 100,000 files, each of a tree of its own (no object
//     shared with another).
//
// It prints medians and the ratios; every sample is listed at the end.
// bench/snapstore.sh starts the daemons and the S3 server (this program
// too: snapbench -serve-s3) and runs this.
//
// Each measure is a case of the table cases: a new one (a thread moving
// to another server) is a function given the daemons, added there.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"warren/api"
	"warren/bench/internal/cpkit"
	"warren/client"
)

// tenant is the tenant of every thread the cases bind.
const tenant = "bench"

// A benchCase is one measure: run measures it on b's daemons and prints
// its table.
type benchCase struct {
	name  string // for -cases
	about string
	run   func(b *bench)
}

// cases are the measures, in the order they run.
var cases = []benchCase{
	{"checkpoint", "checkpoint latency, local folder against the store, and replication lag (10 changed, first checkpoints)", checkpointCase},
}

// A daemon is one of the daemons the script started.
type daemon struct {
	name string // its column
	c    *client.Client
	// repo is its tenant bench's snapshot repository (DATA/snapshots/
	// bench, the local copy when it has a store), to wait for its
	// background work; "" not to wait.
	repo string
}

// bench is what the cases are given.
type bench struct {
	ctx   context.Context
	local *daemon // snapshots in its local folder
	store *daemon // snapshots copied to the S3 store too

	files      int // files in a big workspace
	changed    int // files changed before a timed checkpoint
	runs       int // timed runs of the ten-file checkpoint
	firstRuns  int // first checkpoints of a big workspace
	poll       time.Duration
	lagTimeout time.Duration
	s3Pid      int // the S3 server's process, to wait until it is idle; 0 not to wait

	samples []series // every series measured, for the listing at the end
}

// A series is the samples of one row and column.
type series struct {
	name string
	ds   []time.Duration
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("snapbench: ")
	serve := flag.String("serve-s3", "", "run the S3 server with its data in this folder until SIGTERM, instead of measuring")
	bucket := flag.String("bucket", "warren", "with -serve-s3: the bucket to make")
	addrFile := flag.String("addr-file", "", "with -serve-s3: where to write the server's host:port, access key and secret key, once it serves")
	local := flag.String("local", "", "socket of the daemon that keeps its snapshots in its local folder (required)")
	localRepo := flag.String("local-repo", "", "its tenant bench's snapshot repository (DATA/snapshots/bench), to wait for its background work")
	store := flag.String("store", "", "socket of the daemon that copies its snapshots to the S3 store (required)")
	storeRepo := flag.String("store-repo", "", "its tenant bench's local snapshot repository")
	files := flag.Int("files", 100_000, "files in a big workspace")
	changed := flag.Int("changed", 10, "files changed before each timed checkpoint")
	runs := flag.Int("runs", 9, "timed runs of the small-change checkpoint")
	firstRuns := flag.Int("first-runs", 3, "first checkpoints of a big workspace, each of a tree of its own, on each daemon")
	poll := flag.Duration("poll", 5*time.Millisecond, "interval of the polls of GET .../checkpoints for replicated: true")
	lagTimeout := flag.Duration("lag-timeout", 5*time.Minute, "how long a checkpoint may take to be replicated")
	s3Pid := flag.Int("s3-pid", 0, "the S3 server's pid: each timed checkpoint waits until it is idle; 0 not to wait")
	only := flag.String("cases", "", "comma-separated cases to run (default all): "+caseNames())
	flag.Parse()

	if *serve != "" {
		if *addrFile == "" {
			log.Fatal("-serve-s3 needs -addr-file")
		}
		serveS3(*serve, *bucket, *addrFile)
		return
	}
	if *local == "" || *store == "" {
		log.Fatal("-local and -store are required")
	}
	if *runs < 1 || *firstRuns < 1 || *changed < 1 || *files < *changed {
		log.Fatal("-runs, -first-runs and -changed must be at least 1, -files at least -changed")
	}
	var run []benchCase
	for _, c := range cases {
		if *only == "" || slices.Contains(strings.Split(*only, ","), c.name) {
			run = append(run, c)
		}
	}
	if len(run) == 0 {
		log.Fatalf("-cases %q: no such case (%s)", *only, caseNames())
	}
	b := &bench{
		ctx:   context.Background(),
		local: &daemon{name: "local folder", c: client.New(*local), repo: *localRepo},
		store: &daemon{name: "s3 store", c: client.New(*store), repo: *storeRepo},
		files: *files, changed: *changed, runs: *runs, firstRuns: *firstRuns,
		poll: *poll, lagTimeout: *lagTimeout, s3Pid: *s3Pid,
	}
	defer b.local.c.CloseIdleConnections()
	defer b.store.c.CloseIdleConnections()
	for i, c := range run {
		if i > 0 {
			fmt.Println()
		}
		log.Printf("case %s: %s", c.name, c.about)
		c.run(b)
	}
	b.printSamples()
}

func caseNames() string {
	var names []string
	for _, c := range cases {
		names = append(names, c.name)
	}
	return strings.Join(names, ", ")
}

// checkpointCase measures the checkpoints of big workspaces on both
// daemons: first checkpoints of b.firstRuns trees of b.files files, each
// of its own content, and, right after the first tree's, b.runs
// checkpoints of b.changed files changed in it; each daemon in turn, the
// order swapped from one run to the next, each checkpoint on the store's
// daemon followed until it is replicated, so that a timed checkpoint
// never runs beside an upload.
func checkpointCase(b *bench) {
	b.warmUp()
	first := map[*daemon][]time.Duration{}
	var firstLag []time.Duration
	took := map[*daemon][]time.Duration{}
	var lag []time.Duration
	for r := range b.firstRuns {
		thread := fmt.Sprint("big-", r)
		mnt := map[*daemon]string{}
		var paths []string
		for _, d := range []*daemon{b.local, b.store} {
			bound, err := d.c.Bind(b.ctx, tenant, thread)
			if err != nil {
				log.Fatalf("%s: bind %s: %v", d.name, thread, err)
			}
			mnt[d] = bound.MountPath
			start := time.Now()
			paths = cpkit.MakeTree(bound.MountPath, b.files, thread)
			log.Printf("%s: %d files made in %s in %v", d.name, b.files, thread, time.Since(start).Round(time.Millisecond))
		}
		b.turns(r, func(d *daemon) {
			t, l := b.checkpoint(d, thread, "first")
			first[d] = append(first[d], t)
			if d == b.store {
				firstLag = append(firstLag, l)
			}
		})
		if r > 0 {
			continue
		}
		// The small changes, in the first big workspace, once its
		// first checkpoint is replicated: the steady state of a
		// thread's turns.
		rng := rand.New(rand.NewPCG(1, 2))
		for run := range b.runs {
			line := fmt.Sprintf("change %d\n", run)
			for range b.changed {
				p := paths[rng.IntN(len(paths))]
				for _, m := range mnt {
					cpkit.AppendTo(filepath.Join(m, p), line)
				}
			}
			b.turns(run, func(d *daemon) {
				t, l := b.checkpoint(d, thread, fmt.Sprint("run ", run))
				took[d] = append(took[d], t)
				if d == b.store {
					lag = append(lag, l)
				}
			})
		}
	}

	fmt.Printf("checkpoint latency: POST .../checkpoints, the answer read; medians (first: of %d trees, changed: of %d runs)\n", b.firstRuns, b.runs)
	small := fmt.Sprintf("%d of %d files changed", b.changed, b.files)
	firstRow := fmt.Sprintf("first checkpoint, %d files", b.files)
	b.sideBySide([]string{small, firstRow}, [][2][]time.Duration{
		{took[b.local], took[b.store]},
		{first[b.local], first[b.store]},
	})
	fmt.Println()
	fmt.Printf("replication lag: from the checkpoint's answer to replicated: true (GET .../checkpoints every %v), medians\n", b.poll)
	b.lagTable([]string{small, firstRow}, [][2][]time.Duration{
		{took[b.store], lag},
		{first[b.store], firstLag},
	})
	fmt.Println()
	sm, _, _ := cpkit.Stats(took[b.store])
	lm, _, _ := cpkit.Stats(took[b.local])
	fmt.Printf("checkpoint with the store, %d changed: %v (target <= 20ms): %s\n", b.changed, sm, cpkit.Verdict(sm <= 20*time.Millisecond))
	fmt.Printf("store / local folder, %d changed:     %.2fx\n", b.changed, cpkit.Ratio(sm, lm))
}

// warmUp takes an untimed checkpoint of a small workspace of its own on
// each daemon, and waits until the store's is replicated: the store's
// first write to its bucket makes the bucket's first volume (a second or
// so in SeaweedFS), which is the server's start, not a checkpoint's cost.
func (b *bench) warmUp() {
	for _, d := range []*daemon{b.local, b.store} {
		bound, err := d.c.Bind(b.ctx, tenant, "warm-up")
		if err != nil {
			log.Fatalf("%s: bind warm-up: %v", d.name, err)
		}
		cpkit.MakeTree(bound.MountPath, 100, "warm-up")
		b.checkpoint(d, "warm-up", "warm-up")
	}
}

// turns runs f on each daemon, the local one first in even rounds and
// the store's in odd ones, so that what drifts over the run falls on both.
func (b *bench) turns(round int, f func(d *daemon)) {
	ds := []*daemon{b.local, b.store}
	if round%2 == 1 {
		ds[0], ds[1] = ds[1], ds[0]
	}
	for _, d := range ds {
		f(d)
	}
}

// checkpoint takes a checkpoint of thread on d and returns the time to
// its answer and, on the store's daemon, the time from the answer to
// replicated: true. It starts once d's background work is done, the S3
// server is idle and the disk has nothing dirty (cpkit.WaitSpread,
// waitIdle): it pays for its own work only.
func (b *bench) checkpoint(d *daemon, thread, label string) (took, lag time.Duration) {
	cpkit.WaitSpread(d.repo)
	b.waitIdle()
	syscall.Sync()
	start := time.Now()
	cp, err := d.c.History().Checkpoint(b.ctx, tenant, thread, api.CheckpointRequest{Label: label})
	answered := time.Now()
	if err != nil {
		log.Fatalf("%s: checkpoint %s: %v", d.name, thread, err)
	}
	took = answered.Sub(start)
	if d != b.store {
		log.Printf("%s: checkpoint %s of %s (%s, %d files read) answered in %v",
			d.name, cp.Checkpoint.ID, thread, label, cp.Cost.Read, took.Round(time.Microsecond))
		return took, 0
	}
	lag = b.waitReplicated(d, thread, cp.Checkpoint.ID, answered)
	log.Printf("%s: checkpoint %s of %s (%s, %d files read) answered in %v, replicated %v later",
		d.name, cp.Checkpoint.ID, thread, label, cp.Cost.Read, took.Round(time.Microsecond), lag.Round(time.Millisecond))
	return took, lag
}

// waitIdle waits until the S3 server has used no CPU for idleFor, at most
// idleMax. A store's write goes on in the server after its answer (its
// filer's and volume's own bookkeeping): without the wait, that falls on
// the checkpoint timed next, the local folder's more often than not,
// since it follows a replication in every other round.
func (b *bench) waitIdle() {
	const (
		idleFor = 100 * time.Millisecond
		idleMax = 10 * time.Second
		every   = 10 * time.Millisecond
	)
	if b.s3Pid == 0 {
		return
	}
	start := time.Now()
	last, quiet := cpuTicks(b.s3Pid), time.Now()
	for time.Since(quiet) < idleFor {
		if time.Since(start) > idleMax {
			log.Printf("the S3 server still busy after %v; going on", idleMax)
			return
		}
		time.Sleep(every)
		if t := cpuTicks(b.s3Pid); t != last {
			last, quiet = t, time.Now()
		}
	}
}

// cpuTicks is the user and system time of process pid so far, in clock
// ticks (/proc/PID/stat).
func cpuTicks(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		log.Fatalf("the S3 server (pid %d): %v", pid, err)
	}
	// The command name, in parentheses, may hold spaces: the fields
	// after the last ')' are state (3), ..., utime (14) and stime (15).
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	if len(f) < 13 {
		log.Fatalf("/proc/%d/stat: %q", pid, data)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		log.Fatalf("/proc/%d/stat: %q", pid, data)
	}
	return utime + stime
}

// waitReplicated polls d's checkpoints of thread every b.poll until id
// says replicated, and returns the time from answered to the answer that
// said so: the lag, give or take one poll.
func (b *bench) waitReplicated(d *daemon, thread, id string, answered time.Time) time.Duration {
	for {
		list, err := d.c.History().Checkpoints(b.ctx, tenant, thread)
		now := time.Now()
		if err != nil {
			log.Fatalf("%s: checkpoints of %s: %v", d.name, thread, err)
		}
		if !list.Replicating {
			log.Fatalf("%s: the daemon does not copy its checkpoints to a store (replicating false)", d.name)
		}
		i := slices.IndexFunc(list.Checkpoints, func(c api.CheckpointInfo) bool { return c.ID == id })
		if i < 0 {
			log.Fatalf("%s: checkpoint %s is not in the list of %s", d.name, id, thread)
		}
		if list.Checkpoints[i].Replicated {
			return now.Sub(answered)
		}
		if now.Sub(answered) > b.lagTimeout {
			log.Fatalf("%s: checkpoint %s of %s not replicated %v after its answer (see the daemon's log)", d.name, id, thread, b.lagTimeout)
		}
		time.Sleep(b.poll)
	}
}

// sideBySide prints, per row, the local folder's median, the store's and
// their ratio (store over local: above 1.00x the store costs more).
func (b *bench) sideBySide(rows []string, vals [][2][]time.Duration) {
	fmt.Printf("%-36s %14s %14s %9s\n", "", b.local.name, b.store.name, "ratio")
	for i, name := range rows {
		l, _, _ := cpkit.Stats(vals[i][0])
		s, _, _ := cpkit.Stats(vals[i][1])
		fmt.Printf("%-36s %14v %14v %8.2fx\n", name, l, s, cpkit.Ratio(s, l))
		b.keep(name+", "+b.local.name, vals[i][0])
		b.keep(name+", "+b.store.name, vals[i][1])
	}
}

// lagTable prints, per row, the store's daemon's answer and the lag after
// it (medians).
func (b *bench) lagTable(rows []string, vals [][2][]time.Duration) {
	fmt.Printf("%-36s %14s %14s\n", "", "answered", "replicated")
	for i, name := range rows {
		a, _, _ := cpkit.Stats(vals[i][0])
		l, _, _ := cpkit.Stats(vals[i][1])
		fmt.Printf("%-36s %14v %14v\n", name, a, l.Round(time.Millisecond))
		b.keep(name+", replication lag", vals[i][1])
	}
}

// keep records a series for the listing at the end, once.
func (b *bench) keep(name string, ds []time.Duration) {
	if !slices.ContainsFunc(b.samples, func(s series) bool { return s.name == name }) {
		b.samples = append(b.samples, series{name, ds})
	}
}

// printSamples lists every sample, in the order taken, with p10 and p90:
// a noisy run shows itself.
func (b *bench) printSamples() {
	fmt.Println()
	fmt.Println("samples (in the order taken; p10 .. p90)")
	for _, s := range b.samples {
		_, p10, p90 := cpkit.Stats(s.ds)
		var vs []string
		for _, d := range s.ds {
			vs = append(vs, d.Round(time.Microsecond).String())
		}
		fmt.Printf("  %s: %s (%v .. %v)\n", s.name, strings.Join(vs, " "), p10, p90)
	}
}
