package main

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// kind says how a workload is judged.
type kind int

const (
	// metadata work is judged by time: lower is better.
	metadata kind = iota
	// sequential I/O is judged by throughput: higher is better.
	sequential
)

// A workload is one line of the report. A repetition is before, run and
// after; only run is timed. rep is the repetition, -1 for the warm-up.
type workload struct {
	name   string // short id, for -only and the logs
	label  func(b *bench) string
	kind   kind
	warm   bool // one untimed repetition first, so every timed one starts alike
	setup  func(b *bench, s *system) error
	before func(b *bench, s *system) error
	run    func(b *bench, s *system, rep int) error
	after  func(b *bench, s *system, rep int) error
	// teardown, if set, runs once per system after every repetition of
	// every system, untimed.
	teardown func(b *bench, s *system) error
}

// untarDir is where repetition rep (-1: the warm-up) of the untar
// workload unpacks on s.
func untarDir(s *system, rep int) string {
	return filepath.Join(s.dir, fmt.Sprintf("untar-%d", rep+1))
}

// format shows one sample: seconds for metadata work, MiB/s for sequential.
func (w workload) format(b *bench, d time.Duration) string {
	if w.kind == sequential {
		return fmt.Sprintf("%.0f MiB/s", float64(b.cfg.seqMiB)/d.Seconds())
	}
	if d < 10*time.Second {
		return fmt.Sprintf("%.3f s", d.Seconds())
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

const chunk = 1 << 20 // sequential I/O size per call

func workloads() []workload {
	return []workload{
		{
			name:  "untar",
			label: func(b *bench) string { return fmt.Sprintf("untar (%d entries)", b.tree.entries) },
			kind:  metadata,
			// Each run untars into a folder of its own, and the folders go
			// only when every system is done (teardown), so that no run
			// follows a removal: an ext4 without a journal skips the
			// inodes it freed in the last minute (five, while their table
			// block is dirty) when it allocates, and a removal between
			// runs slowed the next one by an amount that depended on the
			// clock (native took 0.4 s to 7 s). One untimed warm-up run.
			warm: true,
			before: func(b *bench, s *system) error {
				syscall.Sync() // earlier runs' dirty pages must not land in this one
				return nil
			},
			run: func(b *bench, s *system, rep int) error {
				dir := untarDir(s, rep)
				if err := os.Mkdir(dir, 0o755); err != nil {
					return err
				}
				return b.untar(dir)
			},
			after: func(b *bench, s *system, rep int) error {
				if rep == -1 { // check the tree once, in the warm-up
					if err := b.checkTree(untarDir(s, rep)); err != nil {
						s.result("untar").note("%v", err)
					}
				}
				return nil
			},
			teardown: func(b *bench, s *system) error {
				for rep := -1; rep < b.cfg.runs; rep++ {
					if err := os.RemoveAll(untarDir(s, rep)); err != nil {
						return err
					}
				}
				return nil
			},
		},
		{
			name:  "git-status",
			label: func(*bench) string { return "git status" },
			kind:  metadata,
			warm:  true,
			setup: func(b *bench, s *system) error { return b.ensureGit(s) },
			run: func(b *bench, s *system, rep int) error {
				out, err := b.git(filepath.Join(s.dir, "tree"), "status", "--porcelain")
				if err != nil {
					return err
				}
				if len(out) > 0 {
					lines := strings.Split(strings.TrimSpace(string(out)), "\n")
					s.result("git-status").note("git status not clean: %d lines, first %q", len(lines), lines[0])
				}
				return nil
			},
		},
		{
			name:  "grep",
			label: func(*bench) string { return "grep -r" },
			kind:  metadata,
			warm:  true,
			setup: func(b *bench, s *system) error { return b.ensureTree(s) },
			run: func(b *bench, s *system, rep int) error {
				dir := filepath.Join(s.dir, "tree", b.tree.top)
				out, err := b.command(dir, []int{1}, "grep", "-r", "-F", "-l", "--", b.cfg.grep, ".")
				if err != nil {
					return err
				}
				s.result("grep").hits = bytes.Count(out, []byte("\n"))
				return nil
			},
		},
		{
			name:  "stat",
			label: func(*bench) string { return "stat every entry" },
			kind:  metadata,
			warm:  true,
			setup: func(b *bench, s *system) error { return b.ensureTree(s) },
			run: func(b *bench, s *system, rep int) error {
				n, err := statTree(filepath.Join(s.dir, "tree", b.tree.top))
				if err != nil {
					return err
				}
				if n != b.tree.entries {
					s.result("stat").note("saw %d entries, the tarball has %d", n, b.tree.entries)
				}
				return nil
			},
		},
		{
			// The round trip: every open and close of a file is an
			// OPEN, a FLUSH and a RELEASE the daemon answers (the
			// kernel caches the name and the attributes).
			name:  "open-close",
			label: func(b *bench) string { return fmt.Sprintf("open+close x%d", b.cfg.opens) },
			kind:  metadata,
			warm:  true,
			setup: func(b *bench, s *system) error {
				return os.WriteFile(filepath.Join(s.dir, "opened"), []byte("x"), 0o644)
			},
			run: func(b *bench, s *system, rep int) error {
				path := filepath.Join(s.dir, "opened")
				for range b.cfg.opens {
					fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
					if err != nil {
						return err
					}
					if err := syscall.Close(fd); err != nil {
						return err
					}
				}
				return nil
			},
		},
		{
			name:  "seq-write",
			label: func(b *bench) string { return fmt.Sprintf("seq write %s", sizeLabel(b.cfg.seqMiB)) },
			kind:  sequential,
			// The first write of a run lands on blocks the disk has not
			// given out yet, which a virtual disk makes slow for everyone.
			warm: true,
			before: func(b *bench, s *system) error {
				if err := os.Remove(filepath.Join(s.dir, "seq.bin")); err != nil && !os.IsNotExist(err) {
					return err
				}
				syscall.Sync()
				return nil
			},
			run: func(b *bench, s *system, rep int) error {
				return writeSeq(filepath.Join(s.dir, "seq.bin"), b.cfg.seqMiB)
			},
			after: func(b *bench, s *system, rep int) error {
				s.seqReady = true
				return nil
			},
		},
		{
			name:  "seq-read",
			label: func(b *bench) string { return fmt.Sprintf("seq read %s", sizeLabel(b.cfg.seqMiB)) },
			kind:  sequential,
			setup: func(b *bench, s *system) error {
				if s.seqReady {
					return nil
				}
				if err := writeSeq(filepath.Join(s.dir, "seq.bin"), b.cfg.seqMiB); err != nil {
					return err
				}
				s.seqReady = true
				return nil
			},
			before: func(b *bench, s *system) error {
				b.dropCaches()
				return nil
			},
			run: func(b *bench, s *system, rep int) error {
				return readSeq(filepath.Join(s.dir, "seq.bin"), b.cfg.seqMiB)
			},
		},
	}
}

func workloadNames() []string {
	var names []string
	for _, w := range workloads() {
		names = append(names, w.name)
	}
	return names
}

// selectWorkloads returns the workloads named in only (comma-separated),
// in suite order; all of them when only is empty.
func selectWorkloads(only string) ([]workload, error) {
	all := workloads()
	if only == "" {
		return all, nil
	}
	want := map[string]bool{}
	for _, n := range strings.Split(only, ",") {
		want[strings.TrimSpace(n)] = true
	}
	var picked []workload
	for _, w := range all {
		if want[w.name] {
			picked = append(picked, w)
			delete(want, w.name)
		}
	}
	for n := range want {
		return nil, fmt.Errorf("unknown workload %q (have %s)", n, strings.Join(workloadNames(), ", "))
	}
	return picked, nil
}

func sizeLabel(mib int64) string {
	if mib%1024 == 0 {
		return fmt.Sprintf("%d GiB", mib/1024)
	}
	return fmt.Sprintf("%d MiB", mib)
}

// seqData is the block written over and over: pseudo-random, so that no
// layer can shortcut it as zeros.
var seqData = func() []byte {
	buf := make([]byte, chunk)
	r := rand.NewChaCha8([32]byte{'f', 's', 'b', 'e', 'n', 'c', 'h'})
	r.Read(buf)
	return buf
}()

// writeSeq writes mib MiB to a new file at path in 1 MiB calls and fsyncs
// it: the time covers getting the data onto the disk.
func writeSeq(path string, mib int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	for i := int64(0); i < mib; i++ {
		if _, err := f.Write(seqData); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// readSeq reads the file at path to its end in 1 MiB calls and checks its
// size.
func readSeq(path string, mib int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, chunk)
	var n int64
	for {
		m, err := f.Read(buf)
		n += int64(m)
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	if want := mib * chunk; n != want {
		return fmt.Errorf("read %d bytes, want %d", n, want)
	}
	return nil
}
