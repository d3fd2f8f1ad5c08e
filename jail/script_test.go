package jail

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"warren/internal/testenv"
)

func TestPlainWords(t *testing.T) {
	for _, tc := range []struct {
		script string
		words  []string // nil: bash's to run
	}{
		{"git status", []string{"git", "status"}},
		{"  ls\t-la  src/  ", []string{"ls", "-la", "src/"}},
		{"go test ./... -run=TestX -count=1", []string{"go", "test", "./...", "-run=TestX", "-count=1"}},
		{"npm run build:prod --scope=@acme/web", []string{"npm", "run", "build:prod", "--scope=@acme/web"}},
		{"true", []string{"true"}},
		{"false", []string{"false"}},
		{"true --help", nil}, // the program reads --help, the builtin does not
		{"echo hi", nil},     // a builtin
		{"cd src", nil},
		{"exit 3", nil},
		{"time make", nil}, // a keyword
		{"A=1 env", nil},   // an assignment
		{"ls *.go", nil},
		{"ls ~", nil},
		{"cat 'a b'", nil},
		{`cat a\ b`, nil},
		{"echo $HOME", nil},
		{"ls > out", nil},
		{"ls | wc -l", nil},
		{"ls && pwd", nil},
		{"ls; pwd", nil},
		{"ls\npwd", nil},
		{"ls # comment", nil},
		{"ls {a,b}", nil},
		{"ls café", nil},
		{"", nil},
		{"   ", nil},
	} {
		words, ok := plainWords(tc.script)
		if ok != (tc.words != nil) || !slices.Equal(words, tc.words) {
			t.Errorf("plainWords(%q) = %q, %v; want %q", tc.script, words, ok, tc.words)
		}
	}
}

// TestJailScriptAsBash: a script run through the plain-words path answers
// exactly as bash -c: output, messages, exit code and environment, also
// when the program is missing, not executable or a script without #!.
func TestJailScriptAsBash(t *testing.T) { forRoots(t, withBash, testJailScriptAsBash) }

func testJailScriptAsBash(t *testing.T, r testRoot) {
	j, ws := startJailOn(t, r, Config{})
	if j.Shell() != bashShell {
		t.Fatalf("the shell of a root with bash: %q", j.Shell())
	}
	write := func(name, content string, mode os.FileMode) {
		p := filepath.Join(ws, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, NobodyID, NobodyID); err != nil {
			t.Fatal(err)
		}
	}
	write("noshebang.sh", "echo from a script without a shebang: $0\nexit 4\n", 0o755)
	write("notexec", "#!/bin/sh\necho never\n", 0o644)
	env, err := Env(map[string]string{"SHLVL": "5"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	runWith := func(c Cmd) (int, string) {
		t.Helper()
		var out testenv.SyncBuffer
		c.Env, c.Stdout, c.Stderr = env, &out, &out
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		code, err := j.Run(ctx, c)
		if err != nil {
			t.Fatalf("run %+v: %v", c, err)
		}
		return code, out.String()
	}
	for _, script := range []string{
		"env", "ls -a", "true", "false", "id -u", "nosuchprogram --flag",
		"./noshebang.sh arg", "./notexec", "/etc", "cat /etc/hostname",
	} {
		if _, ok := plainWords(script); !ok {
			t.Fatalf("%q is not plain words; the test means to check the plain-words path", script)
		}
		code, out := runWith(Cmd{Script: script})
		wantCode, wantOut := runWith(Cmd{Args: ShellArgv(script)})
		if script == "env" {
			// The same variables; bash lists PWD first and the rest in
			// its own order.
			out, wantOut = sortLines(out), sortLines(wantOut)
		}
		if code != wantCode || out != wantOut {
			t.Errorf("%q: exit %d, %q; bash -c: exit %d, %q", script, code, out, wantCode, wantOut)
		}
	}
}

func sortLines(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// TestJailScriptWithoutShell proves the plain-words path runs no shell: in
// a jail whose root has no /bin (so no /bin/bash nor /bin/sh), plain words
// still run, while a line that needs a shell is refused. (TestImageShells
// does the same on images.)
func TestJailScriptWithoutShell(t *testing.T) {
	j, _ := startJailWith(t, Config{ReadOnly: []string{"/usr", "/lib", "/lib64", "/etc"}})
	env, _ := Env(nil, nil)
	var out bytes.Buffer
	code, err := j.Run(context.Background(), Cmd{Script: "ls -d /usr/bin", Env: env, Stdout: &out})
	if err != nil || code != 0 || out.String() != "/usr/bin\n" {
		t.Fatalf("plain words with no shell in the jail: exit %d, %v, %q", code, err, out.String())
	}
	if j.Shell() != "" {
		t.Errorf("the shell of a root without /bin: %q", j.Shell())
	}
	code, err = j.Run(context.Background(), Cmd{Script: "ls | cat", Env: env})
	if code == 0 || !errors.Is(err, ErrNoShell) || !strings.Contains(err.Error(), "the jail's root has neither /bin/bash nor /bin/sh") {
		t.Fatalf("a pipeline with no shell in the jail: exit %d, %v; want ErrNoShell", code, err)
	}
}
