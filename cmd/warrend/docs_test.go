package main

import (
	"regexp"
	"testing"

	"warren/internal/testenv"
)

// TestDocsShowRealServeFlags: every flag the docs show for `warren serve`
// or `warrend` is one of serve's (cmd/warren's test holds the other
// verbs).
func TestDocsShowRealServeFlags(t *testing.T) {
	code, _, usage := runDaemon(t, "serve", "-h")
	if code != 0 {
		t.Fatalf("warren serve -h: exit %d: %s", code, usage)
	}
	flags := map[string]bool{"version": true, "h": true, "help": true}
	for _, m := range regexp.MustCompile(`(?m)^\s+-([a-z][a-z0-9-]*)`).FindAllStringSubmatch(usage, -1) {
		flags[m[1]] = true
	}
	if len(flags) < 20 {
		t.Fatalf("serve -h lists %d flags: %q", len(flags), usage)
	}
	var cmds []testenv.DocCommand
	for _, c := range testenv.DocCommands(t, "warren") {
		if c.Verb == "serve" {
			cmds = append(cmds, c)
		}
	}
	cmds = append(cmds, testenv.DocCommands(t, "warrend")...)
	if len(cmds) < 10 {
		t.Fatalf("found %d serve examples in the docs; the scan is broken", len(cmds))
	}
	for _, c := range cmds {
		for _, f := range c.Flags {
			if !flags[f] {
				t.Errorf("%s: serve --%s: the docs show a flag serve does not have", c.Where, f)
			}
		}
	}
}
