package main

import (
	"fmt"
	"log"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// A system is one root under test and everything measured on it.
type system struct {
	name string // nativeName, loopbackName, warrenName, warrenOffName or warrenNoMetricsName
	root string // folder the caller gave; empty when not measured
	// unavailable, if set, says why this system is not measured.
	unavailable string
	// dir is fsbench's own folder under root; everything it makes is inside.
	dir    string
	fsType string
	// broken, once set, says why nothing more runs on this system: a step
	// hung past the timeout and may still hold the mount.
	broken string

	// The shared set-up, made once; a failed one is not tried again, its
	// error stands for every workload that needs it.
	treeReady bool  // dir/tree holds the untarred source tree
	treeErr   error // ... or why it does not
	gitReady  bool  // dir/tree is a git repository, everything committed
	gitErr    error // ... or why it is not
	seqReady  bool  // dir/seq.bin holds the sequential file

	results map[string]*result // by workload name
}

// result is what one workload measured on one system.
type result struct {
	samples []time.Duration
	err     error    // the workload failed here; samples are incomplete
	notes   []string // correctness remarks (wrong file counts, dirty git status)
	hits    int      // grep: files that matched
}

func newSystem(name, root, unavailable string) *system {
	if root == "" && unavailable == "" {
		unavailable = "no root given"
	}
	if unavailable != "" {
		root = ""
	}
	return &system{name: name, root: root, unavailable: unavailable, results: map[string]*result{}}
}

// nameWidth is the length of the longest system name, for aligned logs.
const nameWidth = len(warrenNoMetricsName)

// measured reports whether workloads still run on s.
func (s *system) measured() bool { return s.root != "" && s.broken == "" }

// result returns s's result for the named workload, making it on first use.
func (s *system) result(workload string) *result {
	r := s.results[workload]
	if r == nil {
		r = &result{}
		s.results[workload] = r
	}
	return r
}

// note records a correctness remark once.
func (r *result) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	for _, n := range r.notes {
		if n == msg {
			return
		}
	}
	r.notes = append(r.notes, msg)
}

// check makes sure the root is a usable folder, names its filesystem and
// makes fsbench's own folder in it.
func (s *system) check() error {
	var st syscall.Statfs_t
	if err := syscall.Statfs(s.root, &st); err != nil {
		return fmt.Errorf("%s root: %w", s.name, err)
	}
	s.fsType = fsTypeName(st.Type)
	s.dir = filepath.Join(s.root, "fsbench")
	if err := os.Mkdir(s.dir, 0o755); err != nil {
		return fmt.Errorf("%s root: %w (a folder left by an earlier run?)", s.name, err)
	}
	return nil
}

// fsTypeName names the filesystem magic numbers a benchmark is likely to meet.
func fsTypeName(magic int64) string {
	switch uint32(magic) {
	case 0xEF53:
		return "ext4"
	case 0x65735546:
		return "fuse"
	case 0x01021994:
		return "tmpfs"
	case 0x58465342:
		return "xfs"
	case 0x9123683E:
		return "btrfs"
	case 0x794C7630:
		return "overlayfs"
	}
	return fmt.Sprintf("fs 0x%x", magic)
}

// guard runs one step on s and returns how long it took. A step that is
// still running after the timeout is left behind and s is given up: a
// filesystem that hangs once is not measured any further.
func (b *bench) guard(s *system, step string, fn func() error) (time.Duration, error) {
	type outcome struct {
		d   time.Duration
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		start := time.Now()
		err := fn()
		done <- outcome{time.Since(start), err}
	}()
	// External commands are killed at cfg.timeout; the grace lets that
	// surface as their own error first.
	limit := b.cfg.timeout + 10*time.Second
	select {
	case o := <-done:
		if o.err != nil {
			return o.d, fmt.Errorf("%s: %w", step, o.err)
		}
		return o.d, nil
	case <-time.After(limit):
		s.broken = fmt.Sprintf("%s hung for more than %v", step, limit)
		log.Printf("%s: giving up: %s", s.name, s.broken)
		return 0, fmt.Errorf("%s: %s", step, s.broken)
	}
}
