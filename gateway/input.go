package gateway

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
	// maxPathBytes is PATH_MAX less its NUL: the longest path a system
	// call takes. It bounds file API paths, inspection mount paths and a
	// command's cwd.
	maxPathBytes = 4095
	// maxNameBytes is NAME_MAX: the longest name in a folder.
	maxNameBytes = 255
	// maxCommandBytes is MAX_ARG_STRLEN less its NUL: a command runs as
	// bash -c COMMAND, one argument, which exec refuses past it.
	maxCommandBytes = 128<<10 - 1
	// maxEnvBytes bounds a call's extra variables together (NAME=VALUE
	// each), and a thread's: they go with the command to the jail.
	maxEnvBytes = 64 << 10
	// maxLabelBytes bounds a job's label and user, kept in its record and
	// shown in every list.
	maxLabelBytes = 4 << 10
)

// checkPath refuses a path no system call could take: over PATH_MAX, a
// name over NAME_MAX, or a NUL byte. field names it in the refusal.
func checkPath(field, p string) error {
	if len(p) > maxPathBytes {
		return fmt.Errorf("%w: %s is %d bytes, more than %d: %s", api.ErrInvalid, field, len(p), maxPathBytes, quote(p))
	}
	if strings.IndexByte(p, 0) >= 0 {
		return fmt.Errorf("%w: %s holds a NUL byte: %s", api.ErrInvalid, field, quote(p))
	}
	for name := range strings.SplitSeq(p, "/") {
		if len(name) > maxNameBytes {
			return fmt.Errorf("%w: %s has a name of %d bytes, more than %d: %s", api.ErrInvalid, field, len(name), maxNameBytes, quote(name))
		}
	}
	return nil
}

// checkText refuses a text field over max bytes or with a NUL byte (the
// kernel ends a C string there: what ran would not be what was asked).
func checkText(field, s string, max int) error {
	if len(s) > max {
		return fmt.Errorf("%w: %s is %d bytes, more than %d", api.ErrInvalid, field, len(s), max)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return fmt.Errorf("%w: %s holds a NUL byte: %s", api.ErrInvalid, field, quote(s))
	}
	return nil
}

// checkEnvSize refuses extra variables over maxEnvBytes together; their
// names and values are checked by jail.Env.
func checkEnvSize(field string, env map[string]string) error {
	n := 0
	for k, v := range env {
		n += len(k) + 1 + len(v) + 1
	}
	if n > maxEnvBytes {
		return fmt.Errorf("%w: %s are %d bytes, more than %d", api.ErrInvalid, field, n, maxEnvBytes)
	}
	return nil
}

// checkRunPid refuses a pid that a run may not claim: none (0 or below),
// the host's init (pid 1: every orphan of the host would act as the run),
// and the daemon itself or any of its threads (its own requests would be
// judged as the run's). A pid that does not exist is refused later, by
// the hub, as not found.
func checkRunPid(pid int) error {
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

// quote is the one way an error message quotes what a client sent: as a
// Go string, at most maxQuoteBytes of it (cut on a rune boundary), with
// the full length when it was cut. A message may quote several fields;
// writeErrorCode bounds the whole message too.
func quote(s string) string {
	if len(s) <= maxQuoteBytes {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%s...(%d bytes)", strconv.Quote(runePrefix(s, maxQuoteBytes)), len(s))
}

// maxQuoteBytes bounds what quote keeps of a client's input.
const maxQuoteBytes = 128

// maxErrorMessage bounds the message of an error answer: whatever a
// message quotes, the answer stays short.
const maxErrorMessage = 1024

// boundMessage cuts msg to maxErrorMessage bytes, on a rune boundary.
func boundMessage(msg string) string {
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
