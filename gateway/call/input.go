package call

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"

	"warren/api"
)

// Bounds of what a client sends. Each is the kernel's own limit where one
// exists, so a request inside them can work, and one outside them is
// refused at the socket (400, ErrInvalid) instead of failing deep inside
// (a 500 from ENAMETOOLONG, EINVAL or E2BIG).
const (
	// MaxPathBytes is PATH_MAX less its NUL: the longest path a system
	// call takes. It bounds file API paths, inspection mount paths and a
	// command's cwd.
	MaxPathBytes = 4095
	// MaxNameBytes is NAME_MAX: the longest name in a folder.
	MaxNameBytes = 255
	// MaxCommandBytes is MAX_ARG_STRLEN less its NUL: a command runs as
	// bash -c COMMAND, one argument, which exec refuses past it.
	MaxCommandBytes = 128<<10 - 1
	// MaxEnvBytes bounds a call's extra variables together (NAME=VALUE
	// each), and a thread's: they go with the command to the jail.
	MaxEnvBytes = 64 << 10
	// MaxLabelBytes bounds a job's label and user, kept in its record and
	// shown in every list.
	MaxLabelBytes = 4 << 10
)

// CheckPath refuses a path no system call could take: over PATH_MAX, a
// name over NAME_MAX, or a NUL byte. field names it in the refusal.
func CheckPath(field, p string) error {
	if len(p) > MaxPathBytes {
		return fmt.Errorf("%w: %s is %d bytes, more than %d: %s", api.ErrInvalid, field, len(p), MaxPathBytes, Quote(p))
	}
	if strings.IndexByte(p, 0) >= 0 {
		return fmt.Errorf("%w: %s holds a NUL byte: %s", api.ErrInvalid, field, Quote(p))
	}
	for name := range strings.SplitSeq(p, "/") {
		if len(name) > MaxNameBytes {
			return fmt.Errorf("%w: %s has a name of %d bytes, more than %d: %s", api.ErrInvalid, field, len(name), MaxNameBytes, Quote(name))
		}
	}
	return nil
}

// CheckText refuses a text field over max bytes or with a NUL byte (the
// kernel ends a C string there: what ran would not be what was asked).
func CheckText(field, s string, max int) error {
	if len(s) > max {
		return fmt.Errorf("%w: %s is %d bytes, more than %d", api.ErrInvalid, field, len(s), max)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return fmt.Errorf("%w: %s holds a NUL byte: %s", api.ErrInvalid, field, Quote(s))
	}
	return nil
}

// CheckEnvSize refuses extra variables over MaxEnvBytes together; their
// names and values are checked by jail.Env.
func CheckEnvSize(field string, env map[string]string) error {
	n := 0
	for k, v := range env {
		n += len(k) + 1 + len(v) + 1
	}
	if n > MaxEnvBytes {
		return fmt.Errorf("%w: %s are %d bytes, more than %d", api.ErrInvalid, field, n, MaxEnvBytes)
	}
	return nil
}

// CheckRunPid refuses a pid that a run may not claim: none (0 or below),
// the host's init (pid 1: every orphan of the host would act as the run),
// and the daemon itself or any of its threads (its own requests would be
// judged as the run's). A pid that does not exist is refused later, by
// the hub, as not found.
func CheckRunPid(pid int) error {
	if pid <= 0 {
		return fmt.Errorf("%w: pid %d is not a process", api.ErrInvalid, pid)
	}
	if pid == 1 {
		return fmt.Errorf("%w: pid 1 is the host's init and cannot act as a run", api.ErrInvalid)
	}
	if pid == os.Getpid() {
		return fmt.Errorf("%w: pid %d is the gateway itself and cannot act as a run", api.ErrInvalid, pid)
	}
	// A thread id of the daemon is a pid to the kernel, and a FUSE request
	// carries it: /proc/self/task lists them.
	if _, err := os.Lstat("/proc/self/task/" + strconv.Itoa(pid)); err == nil {
		return fmt.Errorf("%w: pid %d is a thread of the gateway and cannot act as a run", api.ErrInvalid, pid)
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("check pid %d against the gateway's threads: %w", pid, err)
	}
	return nil
}

// Quote is the one way an error message quotes what a client sent: as a
// Go string, at most maxQuoteBytes of it (cut on a rune boundary), with
// the full length when it was cut. A message may Quote several fields;
// the router bounds the whole message too (BoundMessage).
func Quote(s string) string {
	if len(s) <= maxQuoteBytes {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%s...(%d bytes)", strconv.Quote(runePrefix(s, maxQuoteBytes)), len(s))
}

// maxQuoteBytes bounds what Quote keeps of a client's input.
const maxQuoteBytes = 128

// maxErrorMessage bounds the message of an error answer: whatever a
// message quotes, the answer stays short.
const maxErrorMessage = 1024

// BoundMessage cuts msg to maxErrorMessage bytes, on a rune boundary.
func BoundMessage(msg string) string {
	if len(msg) <= maxErrorMessage {
		return msg
	}
	return fmt.Sprintf("%s...(message of %d bytes cut)", runePrefix(msg, maxErrorMessage), len(msg))
}

// runePrefix is s cut to at most n bytes (n < len(s)), on a rune boundary.
func runePrefix(s string, n int) string {
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
