package jail

import (
	"errors"
	"fmt"
	"strings"
)

// A command line is run with the jail's shell -c: bash where the jail's
// root has /bin/bash, else /bin/sh (an image without bash), and a jail
// whose root has neither refuses the lines that need one (ErrNoShell).
// The init finds the shell as it builds the root, and says which in its
// ready reply (Jail.Shell).
//
// With bash, a command line is often not run with bash at all. Starting bash costs about a
// millisecond, as much as the rest of a command's start together, and for
// the commonest agent commands (ls -la, git status, cat src/app.ts, go test
// ./...) bash does nothing but split the line into words and exec the
// program in its own place. The jail does that itself when it can prove
// bash would do nothing else: every word is plain (no quoting, expansion,
// globbing, redirection, operator, comment or assignment can hide in it),
// and the first word names no bash builtin or keyword. If the program then
// cannot be found or started as it is (a script without a #! line, a file
// that is not executable), bash -c runs the line after all, so the answer
// and the messages are bash's own.
//
// With /bin/sh the shortcut is not taken: which sh it is (dash, busybox's
// ash, mksh...) decides what it adds to a lone command's environment
// (busybox's sets SHLVL=1, dash's does not), and the jail cannot prove it
// would do the same as one it does not know. With no shell at all, plain
// words are the only lines that can run, and run that way; a program that
// cannot start then fails with the jail's own message (exit 127 or 126).

// The shells a jail's root may have, in the order they are looked for.
const (
	bashShell = "/bin/bash"
	shShell   = "/bin/sh"
)

// ErrNoShell is the error of a command line that needs a shell in a jail
// whose root has neither /bin/bash nor /bin/sh.
var ErrNoShell = errors.New("commands need a shell")

// noShellError is a jail's ErrNoShell, in the words of its root.
func noShellError(image bool) error {
	root := "the jail's root"
	if image {
		root = "the image"
	}
	return fmt.Errorf("jail: %s has neither %s nor %s: %w", root, bashShell, shShell, ErrNoShell)
}

// ShellArgv is how a command line runs when it is not plain, in a jail
// whose shell is bash (Jail.Shell): bash -c.
func ShellArgv(script string) []string { return shellArgv(bashShell, script) }

// shellArgv runs script with shell -c.
func shellArgv(shell, script string) []string { return []string{shell, "-c", script} }

// plainWords returns the words of script if bash -c script would only exec
// them as a program, and false otherwise.
func plainWords(script string) ([]string, bool) {
	words := strings.FieldsFunc(script, func(r rune) bool { return r == ' ' || r == '\t' })
	if len(words) == 0 {
		return nil, false
	}
	for i, w := range words {
		for j := 0; j < len(w); j++ {
			if !plainByte(w[j]) || w[j] == '=' && i == 0 {
				return nil, false
			}
		}
	}
	if name := words[0]; isBashWord(name) {
		// true and false alone do the same as the programs of that name;
		// with arguments the programs read --help and --version.
		if !(len(words) == 1 && (name == "true" || name == "false")) {
			return nil, false
		}
	}
	return words, true
}

// plainByte says whether c means itself to bash anywhere in a word. Left
// out: whitespace other than blanks (a newline ends a command), quotes,
// $ ` \ (expansion, escapes), * ? [ ] (globs), { } (braces), ~ (home),
// # (comments), ! (history, negation), < > | & ; ( ) (operators), and
// every byte outside ASCII, whose meaning depends on the locale.
func plainByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("_-./:,+@%=", c) >= 0
}

// isBashWord says whether w is one of bash's builtins or reserved words
// (compgen -b -k): a line starting with one is bash's to run.
func isBashWord(w string) bool {
	switch w {
	case ".", ":", "[", "alias", "bg", "bind", "break", "builtin", "caller", "cd", "command", "compgen",
		"complete", "compopt", "continue", "declare", "dirs", "disown", "echo", "enable", "eval", "exec",
		"exit", "export", "false", "fc", "fg", "getopts", "hash", "help", "history", "jobs", "kill", "let",
		"local", "logout", "mapfile", "popd", "printf", "pushd", "pwd", "read", "readarray", "readonly",
		"return", "set", "shift", "shopt", "source", "suspend", "test", "times", "trap", "true", "type",
		"typeset", "ulimit", "umask", "unalias", "unset", "wait",
		"if", "then", "else", "elif", "fi", "case", "esac", "for", "select", "while", "until", "do", "done",
		"in", "function", "time", "{", "}", "!", "[[", "]]", "coproc":
		return true
	}
	return false
}
