package main

import (
	"context"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"warren/api"
	"warren/bench/internal/cpkit"
	"warren/client"
)

// The sparse-file measure: a file of sparseSize bytes with 1 MiB of data
// (two 512 KiB pieces, far apart), checkpointed, removed and restored by
// a revert through the daemon; against cp --sparse=always of the same
// file on the disk under test, the native way of copying it.
const (
	sparseSize  = 20 << 30
	sparsePiece = 512 << 10
)

// sparseResult is one system's figures for the sparse measure.
type sparseResult struct {
	took []time.Duration
	read []int64 // bytes the process read (rchar)
	disk []int64 // the result's st_blocks*512
}

// makeSparseFile makes p: sparseSize bytes, data only at 3 GiB and in its
// last 512 KiB, random, a new draw for each run.
func makeSparseFile(p string, run int) {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(sparseSize); err != nil {
		log.Fatal(err)
	}
	// Random, so that it does not compress: the restore reads 1 MiB.
	data := make([]byte, sparsePiece)
	rand.NewChaCha8([32]byte{byte(run)}).Read(data)
	for _, off := range []int64{3 << 30, sparseSize - sparsePiece} {
		if _, err := f.WriteAt(data, off); err != nil {
			log.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		log.Fatal(err)
	}
}

// onDisk returns p's size and the bytes it takes on disk.
func onDisk(p string) (size, disk int64) {
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		log.Fatal(err)
	}
	return st.Size, st.Blocks * 512
}

// rchar returns the bytes process pid has read (read, pread, ...: the
// rchar of /proc/PID/io, all its threads).
func rchar(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		log.Fatalf("read the I/O counts of %d: %v", pid, err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "rchar: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				log.Fatalf("/proc/%d/io: %q", pid, line)
			}
			return n
		}
	}
	log.Fatalf("/proc/%d/io has no rchar", pid)
	return 0
}

// timedCp runs cp --sparse=always src dst and returns how long it took
// and what it read: its counts are read once it has ended, before it is
// reaped (waitid WNOWAIT).
func timedCp(src, dst string) (time.Duration, int64) {
	cmd := exec.Command("cp", "--sparse=always", src, dst)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		log.Fatalf("cp: %v", err)
	}
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			log.Fatalf("wait for cp: %v", err)
		}
		break
	}
	took := time.Since(start)
	read := rchar(cmd.Process.Pid)
	if err := cmd.Wait(); err != nil {
		log.Fatalf("cp --sparse=always %s %s: %v", src, dst, err)
	}
	return took, read
}

// sparseMeasure runs the sparse measure runs times: warren's checkpoint
// and restore (read: the daemon's, whose pid is daemon; 0 not to count),
// and native cp.
func sparseMeasure(ctx context.Context, c *client.Client, work, repo string, daemon, runs int) (cp, restore, native sparseResult) {
	b, err := c.Bind(ctx, "bench", "sparse")
	if err != nil {
		log.Fatalf("bind: %v", err)
	}
	inMount := filepath.Join(b.MountPath, "disk.img")
	dir := filepath.Join(work, "sparse")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	src, dst := filepath.Join(dir, "disk.img"), filepath.Join(dir, "copy.img")
	counted := func(f func()) (time.Duration, int64) {
		var before int64
		if daemon > 0 {
			before = rchar(daemon)
		}
		start := time.Now()
		f()
		took := time.Since(start)
		if daemon > 0 {
			return took, rchar(daemon) - before
		}
		return took, -1
	}
	for r := range runs {
		makeSparseFile(inMount, r)
		makeSparseFile(src, r)
		cpkit.WaitSpread(repo)
		syscall.Sync()
		var id string
		took, read := counted(func() {
			out, err := c.History().Checkpoint(ctx, "bench", "sparse", api.CheckpointRequest{Label: fmt.Sprint("sparse ", r)})
			if err != nil {
				log.Fatalf("checkpoint: %v", err)
			}
			id = out.Checkpoint.ID
		})
		cp.took, cp.read = append(cp.took, took), append(cp.read, read)
		if err := os.Remove(inMount); err != nil {
			log.Fatal(err)
		}
		cpkit.WaitSpread(repo)
		syscall.Sync()
		took, read = counted(func() {
			if _, err := c.History().Revert(ctx, "bench", "sparse", id, false); err != nil {
				log.Fatalf("revert: %v", err)
			}
		})
		size, disk := onDisk(inMount)
		if size != sparseSize {
			log.Fatalf("the restored file has %d bytes, want %d", size, int64(sparseSize))
		}
		restore.took, restore.read, restore.disk = append(restore.took, took), append(restore.read, read), append(restore.disk, disk)

		syscall.Sync()
		took, read = timedCp(src, dst)
		_, disk = onDisk(dst)
		native.took, native.read, native.disk = append(native.took, took), append(native.read, read), append(native.disk, disk)
		os.Remove(dst)
	}
	if err := c.DeleteThread(ctx, "bench", "sparse"); err != nil {
		log.Fatalf("delete: %v", err)
	}
	return cp, restore, native
}

// printSparse prints the sparse measure's medians.
func printSparse(cp, restore, native sparseResult, runs int) {
	fmt.Println()
	fmt.Printf("%-44s %12s %12s %12s   (%d runs)\n", "a 20 GiB sparse file with 1 MiB of data", "median", "read", "on disk", runs)
	row := func(name string, s sparseResult) time.Duration {
		m, _, _ := cpkit.Stats(s.took)
		disk := "-"
		if len(s.disk) > 0 {
			disk = mib(medianInt(s.disk))
		}
		read := "-"
		if s.read[0] >= 0 {
			read = mib(medianInt(s.read))
		}
		fmt.Printf("%-44s %12v %12s %12s\n", name, m, read, disk)
		return m
	}
	wc := row("warren, checkpoint", cp)
	wr := row("warren, restore (revert, the file removed)", restore)
	row("native, cp --sparse=always", native)
	fmt.Printf("warren sparse checkpoint: %v (target < 1s): %s\n", wc, cpkit.Verdict(wc < time.Second))
	fmt.Printf("warren sparse restore:    %v (target < 1s): %s; on disk %s (data 1.00 MiB)\n", wr, cpkit.Verdict(wr < time.Second), mib(medianInt(restore.disk)))
}

func mib(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
}

func medianInt(v []int64) int64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
