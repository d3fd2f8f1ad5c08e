package main

import (
	"bytes"
	"context"
	"regexp"
	"testing"

	"warren/internal/cli"
	"warren/internal/testenv"
)

// TestDocsShowRealCommands holds the docs' command examples (README.md,
// docs/, the benchmarks' and the TypeScript package's READMEs) against
// the CLI, as gateway/openapi_test.go holds docs/api.md's calls against
// the API: every verb shown exists and every flag shown is one of the
// verb's. serve's flags are warrend's: cmd/warrend's test holds those.
func TestDocsShowRealCommands(t *testing.T) {
	vs := verbs()
	flagsOf := map[string]map[string]bool{}
	cmds := testenv.DocCommands(t, "warren")
	if len(cmds) < 50 {
		t.Fatalf("found %d command examples in the docs; the scan is broken", len(cmds))
	}
	for _, c := range cmds {
		if c.Verb == "serve" || c.Verb == "help" {
			continue
		}
		if _, ok := vs[c.Verb]; !ok {
			t.Errorf("%s: warren %s: the docs show a command that does not exist", c.Where, c.Verb)
			continue
		}
		fl := flagsOf[c.Verb]
		if fl == nil {
			fl = verbFlags(t, c.Verb)
			flagsOf[c.Verb] = fl
		}
		for _, f := range c.Flags {
			if !fl[f] && f != "h" && f != "help" {
				t.Errorf("%s: warren %s --%s: the docs show a flag the command does not have", c.Where, c.Verb, f)
			}
		}
	}
}

// flagLine is a flag's line in a flag set's usage (PrintDefaults).
var flagLine = regexp.MustCompile(`(?m)^\s+-([a-z][a-z0-9-]*)`)

// verbFlags returns the flags verb's usage lists.
func verbFlags(t *testing.T, verb string) map[string]bool {
	t.Helper()
	var out, errOut bytes.Buffer
	e := &cli.Env{Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" }}
	if code := run(context.Background(), e, []string{verb, "-h"}); code != 0 {
		t.Fatalf("warren %s -h: exit %d: %s", verb, code, errOut.String())
	}
	fl := map[string]bool{}
	for _, m := range flagLine.FindAllStringSubmatch(errOut.String()+out.String(), -1) {
		fl[m[1]] = true
	}
	if len(fl) == 0 {
		t.Fatalf("warren %s -h lists no flags: %q", verb, errOut.String())
	}
	return fl
}
