package testenv

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"warren/internal/toolserver"
)

// DocCommand is one command line of the docs' examples: the command a
// user would type, with where it is shown.
type DocCommand struct {
	Where string   // file:line
	Verb  string   // "exec"; "" for the program alone
	Flags []string // the flag names shown, without dashes ("thread", "t")
}

// docFiles are the documents whose examples a user copies.
var docFiles = []string{"README.md", "clients/typescript/README.md", "bench/README.md", "docs/*.md", "docs/deploy/*.md"}

var (
	// A command at the start of a line of a fenced block, after an
	// optional prompt.
	fencedCommand = regexp.MustCompile(`^\s*(?:\$\s+)?(?:sudo\s+)?((?:\S*/)?(?:warren|warrend)\s.*)$`)
	// An inline code span.
	codeSpan = regexp.MustCompile("`([^`]*)`")
	// A span that is a command.
	spanCommand = regexp.MustCompile(`^(?:\$\s+)?((?:\S*/)?(?:warren|warrend)(?:\s.*)?)$`)
	verbName    = regexp.MustCompile(`^[a-z][a-z-]*$`)
	flagName    = regexp.MustCompile(`^--?([a-z][a-z0-9-]*)`)
)

// DocCommands returns the command lines of program ("warren" or
// "warrend") that the docs show, in code spans and fenced blocks. Output
// lines that only begin with the program's name ("warren ls: ...", a
// version line) are not commands: their second word is no verb.
func DocCommands(t testing.TB, program string) []DocCommand {
	t.Helper()
	root, err := toolserver.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	var out []DocCommand
	for _, pattern := range docFiles {
		names, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			out = append(out, docCommandsOf(t, root, name, program)...)
		}
	}
	return out
}

func docCommandsOf(t testing.TB, root, name, program string) []DocCommand {
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rel, _ := filepath.Rel(root, name)
	var out []DocCommand
	fenced := false
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(text), "```") {
			fenced = !fenced
			continue
		}
		var lines []string
		if fenced {
			if m := fencedCommand.FindStringSubmatch(text); m != nil {
				lines = append(lines, m[1])
			}
		} else {
			for _, m := range codeSpan.FindAllStringSubmatch(text, -1) {
				if c := spanCommand.FindStringSubmatch(m[1]); c != nil {
					lines = append(lines, c[1])
				}
			}
		}
		for _, l := range lines {
			if c, ok := parseDocCommand(l, program); ok {
				c.Where = rel + ":" + strconv.Itoa(line)
				out = append(out, c)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// parseDocCommand reads one command line: the program, the global flags
// before the verb (warren's --socket and --tenant), the verb, and the
// flags up to a "--" (after it come the command's own arguments) or the
// end of the command (a pipe, a redirection, a comment).
func parseDocCommand(line, program string) (DocCommand, bool) {
	toks := strings.Fields(line)
	if len(toks) == 0 || filepath.Base(toks[0]) != program {
		return DocCommand{}, false
	}
	toks = toks[1:]
	var c DocCommand
	verbAt := 0
	if program == "warren" {
		for verbAt < len(toks) && (strings.HasPrefix(toks[verbAt], "--socket") || strings.HasPrefix(toks[verbAt], "--tenant")) {
			c.Flags = append(c.Flags, strings.TrimLeft(strings.SplitN(toks[verbAt], "=", 2)[0], "-"))
			if strings.Contains(toks[verbAt], "=") {
				verbAt++
			} else {
				verbAt += 2
			}
		}
		if verbAt >= len(toks) || !verbName.MatchString(toks[verbAt]) {
			return DocCommand{}, false
		}
		c.Verb = toks[verbAt]
		verbAt++
	}
	for _, tok := range toks[min(verbAt, len(toks)):] {
		if tok == "--" || strings.ContainsAny(tok[:1], "|>#&;") {
			break
		}
		tok = strings.TrimLeft(tok, "[(")
		if m := flagName.FindStringSubmatch(tok); m != nil {
			c.Flags = append(c.Flags, m[1])
		}
	}
	return c, true
}
