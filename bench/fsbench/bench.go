package main

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"
)

// bench is one run of the suite over every system.
type bench struct {
	cfg     config
	tree    treeInfo
	systems []*system
	started time.Time
	// cacheNote, if set, says the page cache could not be dropped before
	// the sequential read, so its figures are warm-cache.
	cacheNote string
}

// measure runs one workload on every measured system: its set-up once,
// one untimed warm-up repetition if the workload asks for it, then
// cfg.runs timed repetitions. Within a repetition the systems take turns,
// and the turn order rotates from one repetition to the next, so that no
// system always follows the same neighbour (whose clean-up, say, leaves the
// disk busy).
func (b *bench) measure(w workload) {
	var live []*system
	for _, s := range b.systems {
		if !s.measured() {
			continue
		}
		r := s.result(w.name)
		if w.setup != nil {
			d, err := b.guard(s, w.name+" set-up", func() error { return w.setup(b, s) })
			if err != nil {
				r.err = err
				log.Printf("%s: %s: %v", s.name, w.name, err)
				continue
			}
			if d > time.Second {
				log.Printf("%-*s %-10s set-up (untimed) took %.1f s", nameWidth, s.name, w.name, d.Seconds())
			}
		}
		live = append(live, s)
	}
	first := 0
	if w.warm {
		first = -1
	}
	for rep := first; rep < b.cfg.runs; rep++ {
		what := "warm-up"
		if rep >= 0 {
			what = fmt.Sprintf("run %d/%d", rep+1, b.cfg.runs)
		}
		live = b.each(rotate(live, rep+1), w, what, func(s *system) error {
			d, err := b.repeat(w, s, rep)
			if err != nil {
				return err
			}
			if rep >= 0 {
				s.result(w.name).samples = append(s.result(w.name).samples, d)
			}
			log.Printf("%-*s %-10s %s: %s", nameWidth, s.name, w.name, what, w.format(b, d))
			return nil
		})
	}
	if w.teardown == nil {
		return
	}
	// Every system, a failed one too: its repetitions may have left work.
	for _, s := range b.systems {
		if !s.measured() {
			continue
		}
		if _, err := b.guard(s, w.name+" teardown", func() error { return w.teardown(b, s) }); err != nil {
			log.Printf("%s: %s teardown: %v", s.name, w.name, err)
		}
	}
}

// repeat runs one repetition of w on s: its preparation and clean-up
// untimed, and returns how long the timed part took.
func (b *bench) repeat(w workload, s *system, rep int) (time.Duration, error) {
	if w.before != nil {
		if _, err := b.guard(s, w.name+" preparation", func() error { return w.before(b, s) }); err != nil {
			return 0, err
		}
	}
	d, err := b.guard(s, w.name, func() error { return w.run(b, s, rep) })
	if err != nil {
		return 0, err
	}
	if w.after != nil {
		c, err := b.guard(s, w.name+" clean-up", func() error { return w.after(b, s, rep) })
		if err != nil {
			return 0, err
		}
		if c > time.Second {
			log.Printf("%-*s %-10s clean-up (untimed) took %.1f s", nameWidth, s.name, w.name, c.Seconds())
		}
	}
	return d, nil
}

// rotate returns the systems in turn order for a repetition: the slice
// rotated left by n.
func rotate(systems []*system, n int) []*system {
	if len(systems) == 0 {
		return nil
	}
	n %= len(systems)
	return append(slices.Clone(systems[n:]), systems[:n]...)
}

// each calls fn for every system in live and returns those it did not
// fail on, in their original order; a failure is recorded as the
// workload's error on that system.
func (b *bench) each(live []*system, w workload, what string, fn func(*system) error) []*system {
	failed := map[*system]bool{}
	for _, s := range live {
		if !s.measured() {
			failed[s] = true
			continue
		}
		if err := fn(s); err != nil {
			s.result(w.name).err = err
			log.Printf("%s: %s %s: %v", s.name, w.name, what, err)
			failed[s] = true
		}
	}
	var ok []*system
	for _, s := range b.systems {
		if slices.Contains(live, s) && !failed[s] {
			ok = append(ok, s)
		}
	}
	return ok
}

// command runs an external program in dir with a fixed, minimal set of
// environment changes (C locale, no user or system git config) and returns
// its standard output. okCodes lists exit codes other than 0 that are not
// failures (grep exits 1 when nothing matches).
func (b *bench) command(dir string, okCodes []int, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"LC_ALL=C",
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0",
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	err := cmd.Run()
	if exit, ok := err.(*exec.ExitError); ok && exit.Exited() {
		for _, c := range okCodes {
			if exit.ExitCode() == c {
				err = nil
			}
		}
	}
	if err != nil {
		msg := strings.Join(strings.Fields(strings.ReplaceAll(stderr.String(), "\n", " | ")), " ")
		if len(msg) > 300 {
			msg = msg[:300] + "..."
		}
		return stdout.Bytes(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, msg)
	}
	return stdout.Bytes(), nil
}

// git runs git with the settings that keep the measurement about the
// filesystem: no fsmonitor, no untracked cache, no automatic gc, and any
// owner accepted (a FUSE mount may report another one).
func (b *bench) git(dir string, args ...string) ([]byte, error) {
	base := []string{
		"-c", "core.fsmonitor=false",
		"-c", "core.untrackedCache=false",
		"-c", "gc.auto=0",
		"-c", "safe.directory=*",
		"-c", "user.name=fsbench",
		"-c", "user.email=fsbench@localhost",
	}
	return b.command(dir, nil, "git", append(base, args...)...)
}

// dropCaches writes dirty pages out and drops the page, dentry and inode
// caches, so that the next read comes from the disk. Without root it
// cannot; the report then says the read figures are warm-cache.
func (b *bench) dropCaches() {
	syscall.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0); err != nil && b.cacheNote == "" {
		b.cacheNote = fmt.Sprintf("page cache not dropped (%v): sequential read figures are warm-cache", err)
		log.Print(b.cacheNote)
	}
}
