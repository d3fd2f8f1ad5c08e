package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/testenv"
)

// The tests of this file attack the host's view of a workspace: a root
// process on the host opens mnt/<tenant>/<thread>/<name>, with <name> and
// the links around it made by the agent. Each builds a link that the
// kernel would follow out of the workspace, to a real file outside it (a
// file in the test's temporary folder, and the other thread's file), and
// checks that no host read or write ever gets there. The race tests run a
// racer and a reader for a fixed time; none may escape even once.

// raceFor bounds each race test: the escapes they reproduce took at most
// a few hundred tries on the code before nosymfollow, a few milliseconds.
const raceFor = 3 * time.Second

// hostWorld is an escapeWorld with a secret in the test's own folder.
type hostWorld struct {
	*escapeWorld
	secret    string // absolute path of a host file outside every workspace
	victimRel string // the other thread's secret, relative to the agent's mount
	up        string // "../" enough times to climb from the agent's mount to /
}

func newHostWorld(t *testing.T) *hostWorld {
	w := &hostWorld{escapeWorld: newEscapeWorld(t)}
	w.secret = filepath.Join(t.TempDir(), "host-secret")
	must(t, os.WriteFile(w.secret, []byte("host-secret\n"), 0o600))
	rel, err := filepath.Rel(w.agent, filepath.Join(w.victim, "secret"))
	must(t, err)
	w.victimRel = rel
	w.up = strings.Repeat("../", depth(w.agent)+1)
	return w
}

// depth counts the names of an absolute path.
func depth(p string) int {
	return len(strings.Split(strings.Trim(filepath.Clean(p), "/"), "/"))
}

// nested is dir/<prefix>1/<prefix>2/.../<prefix>n.
func nested(dir, prefix string, n int) string {
	for i := 1; i <= n; i++ {
		dir = filepath.Join(dir, fmt.Sprintf("%s%d", prefix, i))
	}
	return dir
}

// fromTop is the secret's path relative to /.
func (w *hostWorld) fromTop() string { return strings.TrimPrefix(w.secret, "/") }

// leaked fails the test if a host read through path returned a secret.
func leaked(t *testing.T, what string, b []byte, err error) bool {
	t.Helper()
	if err == nil && strings.Contains(string(b), "secret") {
		t.Errorf("%s: the host read %q outside the workspace", what, b)
		return true
	}
	return false
}

// wantNotFollowed checks that a host open of path does not follow the
// agent's link: ELOOP, the kernel refusing to follow any link there.
func wantNotFollowed(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	leaked(t, "read "+path, b, err)
	wantErrno(t, "host read through the link "+path, err, syscall.ELOOP)
}

// TestHostLinksLongNames: nested folders of 250-byte names make a path far
// longer than PATH_MAX. The kernel walks it one name at a time; a link
// check that opens joined paths fails there with ENAMETOOLONG and must not
// take that for "nothing there". The agent's chain: L (at the root) leads
// into the tenth folder to m, m leads to the twentieth folder to up, up
// climbs exactly to the root, and m goes on climbing from there.
func TestHostLinksLongNames(t *testing.T) {
	w := newHostWorld(t)
	names := testenv.LongNames(20)
	mnt := testenv.NestedDirs(t, w.agent, names)
	// up climbs from the twentieth folder exactly to the root: allowed.
	must(t, unix.Symlinkat(strings.Repeat("../", 20), mnt[20], "up"))
	chain := strings.Join(names[10:], "/") + "/up/"
	targets := map[string]string{
		"m-host":   chain + w.up + w.fromTop(),
		"m-victim": chain + w.victimRel,
	}
	for m, target := range targets {
		err := unix.Symlinkat(target, mnt[10], m)
		wantErrno(t, "symlink "+m+" leading out through the long names", err, syscall.EPERM)
		// L at the root leads to m: harmless while m is missing.
		must(t, os.Symlink(strings.Join(names[:10], "/")+"/"+m, filepath.Join(w.agent, "L-"+m)))
	}
	for m := range targets {
		wantNotFollowed(t, filepath.Join(w.agent, "L-"+m))
	}

	// The same links planted in the backing folder, behind the
	// filesystem's back: reading m is refused, and the host does not
	// follow L.
	// (Fresh names: the mount may remember for a while that m-* is not
	// there.)
	back := testenv.NestedDirs(t, w.agentRoot, names)
	for m, target := range targets {
		p := "planted-" + m
		must(t, unix.Symlinkat(target, back[10], p))
		must(t, os.Symlink(strings.Join(names[:10], "/")+"/"+p, filepath.Join(w.agentRoot, "L-"+p)))
	}
	for m := range targets {
		p := "planted-" + m
		buf := make([]byte, 8192)
		_, err := unix.Readlinkat(mnt[10], p, buf)
		wantErrno(t, "readlink of the planted "+p, err, syscall.EPERM)
		wantNotFollowed(t, filepath.Join(w.agent, "L-"+p))
	}
	w.sameOutside(t)
}

// TestHostLinksHardLinkedSymlink: a symlink with two names is followed
// from the folder the kernel came through, whatever name the check looks
// at. The recipe: a deep symlink that climbs exactly to the root; a hard
// link of it in a sibling folder; that folder moved to the top; a hard
// link deep again. The top name then climbs far above the root.
func TestHostLinksHardLinkedSymlink(t *testing.T) {
	w := newHostWorld(t)
	k := depth(w.agent) + 3
	parent := nested(w.agent, "p", k-1)
	must(t, os.MkdirAll(filepath.Join(parent, "c"), 0o755))
	must(t, os.MkdirAll(filepath.Join(parent, "s"), 0o755))
	up := filepath.Join(parent, "c", "up")
	must(t, os.Symlink(strings.Repeat("../", k), up)) // the root: allowed

	// The recipe, through the mount as the agent would do it. Each
	// step may be refused; none may open a way out.
	errLink := os.Link(up, filepath.Join(parent, "s", "up2"))
	wantErrno(t, "hard link of a symlink", errLink, syscall.EPERM)
	os.Rename(filepath.Join(parent, "s"), filepath.Join(w.agent, "s"))
	os.Link(filepath.Join(w.agent, "s", "up2"), filepath.Join(parent, "c", "up3"))
	// s/up2 leads to the host's /, from where both secrets are named.
	victimFromTop := strings.TrimPrefix(filepath.Join(w.victim, "secret"), "/")
	for _, rest := range []string{w.fromTop(), victimFromTop} {
		// Joined by hand: filepath.Join would clean the ".." away.
		b, err := os.ReadFile(w.agent + "/s/up2/" + rest)
		leaked(t, "read s/up2/"+rest, b, err)
	}

	// The same names planted behind the filesystem's back: a symlink
	// with two names is refused when read, and never followed by the
	// host.
	broot := strings.Replace(parent, w.agent, w.agentRoot, 1)
	must(t, os.MkdirAll(filepath.Join(w.agentRoot, "s2"), 0o755))
	must(t, os.Link(filepath.Join(broot, "c", "up"), filepath.Join(w.agentRoot, "s2", "up2")))
	for _, name := range []string{filepath.Join(w.agent, "s2", "up2"), up} {
		_, err := os.Readlink(name)
		wantErrno(t, "readlink of a symlink with two names", err, syscall.EPERM)
	}
	for _, rest := range []string{w.fromTop(), victimFromTop} {
		wantNotFollowed(t, w.agent+"/s2/up2/"+rest)
	}
	w.sameOutside(t)
}

// TestHostLinksFolderRenameRace: the agent moves a folder to the top and
// back in a loop while a host process reads through a link in it. The
// link's target climbs exactly to the root from the folder's own place,
// and far above it from the top.
//
// Through the mount, the rename check refuses every move that would carry
// the link to where it leads out, so that phase shows the check holding
// under a reader. The second phase makes the same moves in the backing
// folder, behind the filesystem's back, where nothing checks them: there
// the moves happen, and only nosymfollow keeps the reader inside.
func TestHostLinksFolderRenameRace(t *testing.T) {
	w := newHostWorld(t)
	k := depth(w.agent) + 2
	home := filepath.Join(nested(w.agent, "d", k-1), "F")
	top := filepath.Join(w.agent, "F")
	must(t, os.MkdirAll(home, 0o755))
	// From home (k deep) these reach root/tmp/... and root/globex/...,
	// which do not exist; from the top they reach the host's / and the
	// other thread's mount.
	must(t, os.Symlink(strings.Repeat("../", k)+w.fromTop(), filepath.Join(home, "l-host")))
	must(t, os.Symlink("../../../"+strings.TrimPrefix(w.victimRel, "../../"), filepath.Join(home, "l-victim")))

	through := func(p string) string { return strings.Replace(p, w.agent, w.agentRoot, 1) }
	for _, phase := range []struct {
		name      string
		home, top string
		mustMove  bool
	}{
		{"through the mount", home, top, false},
		{"behind the filesystem's back", through(home), through(top), true},
	} {
		reads, moves, refused := raceFolderMoves(t, phase.home, phase.top, home)
		t.Logf("%s: %d host reads, %d folder moves, %d refused", phase.name, reads, moves, refused)
		if phase.mustMove && moves == 0 {
			t.Errorf("%s: no folder move happened, so the race was not run", phase.name)
		}
		os.Rename(phase.top, phase.home)
	}
	wantNotFollowed(t, filepath.Join(home, "l-host"))
	w.sameOutside(t)
}

// raceFolderMoves moves the folder home to top and back in a loop, for
// raceFor, while a host process reads the links in it through read (the
// folder's path in the mount). It fails the test if a read leaks.
func raceFolderMoves(t *testing.T, home, top, read string) (reads, moves, refused int) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := os.Rename(home, top); err != nil {
				refused++
				continue
			}
			moves++
			if err := os.Rename(top, home); err != nil {
				t.Errorf("move the folder back: %v", err)
				return
			}
		}
	}()
	for deadline := time.Now().Add(raceFor); time.Now().Before(deadline); {
		reads++
		b, err := os.ReadFile(filepath.Join(read, "l-host"))
		if leaked(t, "read F/l-host", b, err) {
			break
		}
		b, err = os.ReadFile(filepath.Join(read, "l-victim"))
		if leaked(t, "read F/l-victim", b, err) {
			break
		}
	}
	close(stop)
	wg.Wait()
	return reads, moves, refused
}

// TestHostLinksSwapRace: the race between a check and the kernel's
// follow. d/deep flips between a harmless folder and a link that climbs
// exactly to the root; x, beside d, walks d/deep and climbs from there.
// Whenever the host's walk of x reads d/deep after x was checked, the
// walk climbs above the root. A host process that writes through such a
// name would create a root-owned file outside the workspace.
func TestHostLinksSwapRace(t *testing.T) {
	w := newHostWorld(t)
	j := depth(w.agent)
	q := nested(w.agent, "q", j)
	d := filepath.Join(q, "d")
	must(t, os.MkdirAll(filepath.Join(d, "e"), 0o755))
	harmless, evil := "e", strings.Repeat("../", j+1) // evil: the root
	must(t, os.Symlink(harmless, filepath.Join(d, "deep")))
	created := filepath.Join(filepath.Dir(w.secret), "created-by-host")
	climb := "d/deep/" + strings.Repeat("../", j+2)
	must(t, os.Symlink(climb+w.fromTop(), filepath.Join(q, "x-host")))
	must(t, os.Symlink("d/deep/"+w.victimRel, filepath.Join(q, "x-victim")))
	must(t, os.Symlink(climb+strings.TrimPrefix(created, "/"), filepath.Join(q, "x-write")))

	stop := make(chan struct{})
	var wg sync.WaitGroup
	flips := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		tmp := filepath.Join(d, "deep.tmp")
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			target := harmless
			if i%2 == 0 {
				target = evil
			}
			os.Remove(tmp)
			if err := os.Symlink(target, tmp); err != nil {
				t.Errorf("symlink %s: %v", target, err)
				return
			}
			if err := os.Rename(tmp, filepath.Join(d, "deep")); err != nil {
				t.Errorf("flip d/deep: %v", err)
				return
			}
			flips++
		}
	}()
	tries := 0
	for deadline := time.Now().Add(raceFor); time.Now().Before(deadline); {
		tries++
		b, err := os.ReadFile(filepath.Join(q, "x-host"))
		if leaked(t, "read x-host", b, err) {
			break
		}
		b, err = os.ReadFile(filepath.Join(q, "x-victim"))
		if leaked(t, "read x-victim", b, err) {
			break
		}
		if os.WriteFile(filepath.Join(q, "x-write"), []byte("written by the host"), 0o644) == nil {
			if _, err := os.Stat(created); err == nil {
				t.Errorf("a host write through x-write created %s outside the workspace", created)
				break
			}
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d host tries, %d flips of d/deep", tries, flips)
	if _, err := os.Stat(created); err == nil {
		t.Errorf("%s exists outside the workspace", created)
	}
	w.sameOutside(t)
}

// TestHostViewsNoSymfollow: every host-facing view (the thread's mount,
// inspection mounts) is mounted nosymfollow, so a host process follows no
// link in it and reads links as links; inside the jail, the same links are
// followed: a link to a folder, node_modules/.bin-style relative links to
// programs, and git on a tree with links.
func TestHostViewsNoSymfollow(t *testing.T) {
	w := newHostWorld(t)
	a := w.agent
	// The agent's links, made and used in the jail: a link to a folder,
	// node_modules/.bin-style relative links to a program, git on a tree
	// with links.
	code, out := w.d.execIn("agent", `set -e
cd /workspace
mkdir -p pkg/bin node_modules/.bin
printf '#!/bin/sh\necho tool ran\n' > pkg/bin/tool && chmod +x pkg/bin/tool
ln -s ../../pkg/bin/tool node_modules/.bin/tool
ln -s pkg dirlink
cat dirlink/bin/tool >/dev/null
ls dirlink/bin
node_modules/.bin/tool
PATH=/workspace/node_modules/.bin:$PATH tool
(cd dirlink/bin && ./tool)
git init -q repo && cd repo
git config user.email a@example.com && git config user.name agent
mkdir -p src && echo hi > src/a.txt && ln -s src/a.txt link && ln -s src dir
git add -A && git commit -qm links
git status --porcelain
cat link dir/a.txt
echo all-done`, "--tenant", "acme")
	if code != 0 || strings.Count(out, "tool ran") != 3 || !strings.Contains(out, "hi\nhi\nall-done") {
		t.Errorf("links in the jail: exit %d:\n%s", code, out)
	}

	// The jail's bind of the workspace is not nosymfollow.
	if code, out := w.d.execIn("agent", "grep ' /workspace ' /proc/self/mountinfo", "--tenant", "acme"); code != 0 || strings.Contains(out, "nosymfollow") {
		t.Errorf("/workspace in the jail: exit %d, %q; want it without nosymfollow", code, out)
	}

	ro := filepath.Join(t.TempDir(), "ro")
	rw := filepath.Join(t.TempDir(), "rw")
	for _, p := range []string{ro, rw} {
		must(t, os.Mkdir(p, 0o755))
	}
	w.d.mustWarren("mount", "--tenant", "acme", "--thread", "agent", ro)
	t.Cleanup(func() { w.d.warren("umount", ro) })
	w.d.mustWarren("mount", "--tenant", "acme", "--thread", "agent", "--rw", rw)
	t.Cleanup(func() { w.d.warren("umount", rw) })

	seen := 0
	for _, m := range testenv.Mounts(t) {
		if m.Path != a && m.Path != ro && m.Path != rw && m.Path != w.victim {
			continue
		}
		seen++
		if !strings.Contains(strings.Join(m.Options, ","), "nosymfollow") {
			t.Errorf("mount %s has options %v, want nosymfollow", m.Path, m.Options)
		}
	}
	if seen != 4 {
		t.Errorf("found %d of the 4 host views in the mount table", seen)
	}
	// The same links, seen from the host: there, and read as links, but
	// never followed.
	for _, view := range []string{a, ro, rw} {
		for _, link := range []string{"dirlink/bin/tool", "node_modules/.bin/tool", "dirlink", "repo/link", "repo/dir/a.txt"} {
			_, err := os.Stat(filepath.Join(view, link))
			wantErrno(t, "host stat through "+link, err, syscall.ELOOP)
		}
		if got, err := os.Readlink(filepath.Join(view, "dirlink")); err != nil || got != "pkg" {
			t.Errorf("readlink dirlink in %s: %q, %v", view, got, err)
		}
		if b, err := os.ReadFile(filepath.Join(view, "pkg", "bin", "tool")); err != nil || !strings.Contains(string(b), "tool ran") {
			t.Errorf("read pkg/bin/tool in %s: %q, %v", view, b, err)
		}
	}
	w.sameOutside(t)
}
