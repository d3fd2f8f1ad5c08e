package threadlimit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Process returns the gauges of this very process, read from /proc.
func Process() Gauges { return procGauges{} }

type procGauges struct{}

var _ Gauges = procGauges{}

// Descriptors counts the entries of /proc/self/fd (names only: no stat,
// no sort) against the soft open-file limit.
func (procGauges) Descriptors() (int, int, error) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 0, 0, fmt.Errorf("getrlimit: %w", err)
	}
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return 0, 0, err
	}
	defer d.Close()
	open := 0
	for {
		names, err := d.Readdirnames(4096)
		open += len(names)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			// A short count would admit blind.
			return 0, 0, fmt.Errorf("list /proc/self/fd: %w", err)
		}
	}
	// The listing's own descriptor is counted: it is one the bind will
	// not have, so the count errs on the side of refusing.
	return open, int(min(lim.Cur, uint64(1<<31-1))), nil
}

// Memory reads the resident pages and the threads from /proc/self/stat:
// one small read, cheaper than /proc/self/status.
func (procGauges) Memory() (int64, int, error) {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, 0, err
	}
	return parseStat(b, int64(os.Getpagesize()))
}

// parseStat reads num_threads (field 20) and rss (field 24, in pages) of
// a /proc/<pid>/stat line. The command (field 2) is in parentheses and
// may hold spaces and parentheses itself: the fields are counted from
// the last ')'.
func parseStat(b []byte, pageSize int64) (int64, int, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, errors.New("/proc/self/stat: no command field")
	}
	f := bytes.Fields(b[i+1:]) // f[0] is field 3 (state)
	if len(f) < 22 {
		return 0, 0, fmt.Errorf("/proc/self/stat: %d fields after the command", len(f))
	}
	threads, err := strconv.Atoi(string(f[20-3]))
	if err != nil {
		return 0, 0, fmt.Errorf("/proc/self/stat: threads: %w", err)
	}
	pages, err := strconv.ParseInt(string(f[24-3]), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("/proc/self/stat: rss: %w", err)
	}
	return pages * pageSize, threads, nil
}
