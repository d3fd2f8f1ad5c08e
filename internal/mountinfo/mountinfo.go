// Package mountinfo reads mountinfo files (/proc/self/mountinfo): their
// lines, and the kernel's escapes of the paths in them. It imports only the standard
// library, so any program of the project may use it.
package mountinfo

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Unescape undoes the octal escapes the kernel writes in mountinfo's
// paths and sources (\040 for a space, \011 a tab, \012 a newline, \134 a
// backslash). What is not three octal digits that fit in a byte stays as
// it is.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, ok := octalByte(s[i+1 : i+4]); ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// octalByte parses three octal digits that fit in a byte.
func octalByte(d string) (byte, bool) {
	v := 0
	for i := 0; i < len(d); i++ {
		if d[i] < '0' || d[i] > '7' {
			return 0, false
		}
		v = v*8 + int(d[i]-'0')
	}
	if v > 0xff {
		return 0, false
	}
	return byte(v), true
}

// Entry is one line of a mountinfo file (proc(5)), its paths unescaped.
type Entry struct {
	ID, Parent uint64
	// Dev is the filesystem's device (major:minor): a FUSE mount's minor
	// names its connection in /sys/fs/fuse/connections.
	Dev     string
	Path    string // the mount point
	Options string // the per-mount options, e.g. "rw,nosuid,nodev,nosymfollow"
	FSType  string // e.g. "fuse.warren"
	Source  string // the filesystem's source, e.g. "warren:shared-2"
}

// Scan calls visit with each entry of the mountinfo file at path, in
// table order, until visit returns false. It asks no filesystem anything.
// A line it cannot read is an error, never skipped: a caller deciding
// what to detach or hide must not miss a mount.
func Scan(path string, visit func(Entry) bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		e, err := parse(sc.Text())
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if !visit(e) {
			return nil
		}
	}
	return sc.Err()
}

// parse reads one line: ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS
// [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS.
func parse(line string) (Entry, error) {
	fields := strings.Fields(line)
	sep := slices.Index(fields, "-")
	if len(fields) < 6 || sep < 6 || len(fields) < sep+3 {
		return Entry{}, fmt.Errorf("a line not as proc(5) says: %q", line)
	}
	id, err1 := strconv.ParseUint(fields[0], 10, 64)
	parent, err2 := strconv.ParseUint(fields[1], 10, 64)
	if err1 != nil || err2 != nil {
		return Entry{}, fmt.Errorf("a bad mount id in %q", line)
	}
	return Entry{
		ID: id, Parent: parent, Dev: fields[2], Path: Unescape(fields[4]), Options: fields[5],
		FSType: fields[sep+1], Source: Unescape(fields[sep+2]),
	}, nil
}
