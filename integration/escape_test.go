package integration

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"warren/internal/testenv"
)

// escapeWorld is two threads of two tenants and a server secret beside the
// data folder. Thread "victim" holds a secret; thread "agent" tries to reach
// it, and the server's .env, through its own workspace.
type escapeWorld struct {
	d          *daemon
	agent      string // mount path of the attacking thread
	agentRoot  string // its backing folder
	victim     string // mount path of the other thread
	victimRoot string
	envFile    string // the server's secrets
}

func newEscapeWorld(t *testing.T) *escapeWorld {
	d := newDaemon(t)
	w := &escapeWorld{d: d}
	w.envFile = filepath.Join(filepath.Dir(d.data), ".env")
	must(t, os.WriteFile(w.envFile, []byte("OPENAI_API_KEY=sk-server-secret\n"), 0o600))
	w.agent = d.bind("acme", "agent")
	w.victim = d.bind("globex", "victim")
	w.agentRoot = strings.Replace(w.agent, filepath.Join(d.data, "mnt"), filepath.Join(d.data, "workspaces"), 1)
	w.victimRoot = strings.Replace(w.victim, filepath.Join(d.data, "mnt"), filepath.Join(d.data, "workspaces"), 1)
	must(t, os.WriteFile(filepath.Join(w.victim, "secret"), []byte("victim-secret"), 0o600))
	return w
}

// sameOutside checks that nothing outside the agent's workspace changed.
func (w *escapeWorld) sameOutside(t *testing.T) {
	t.Helper()
	if b, err := os.ReadFile(filepath.Join(w.victimRoot, "secret")); err != nil || string(b) != "victim-secret" {
		t.Errorf("victim's secret changed: %q, %v", b, err)
	}
	entries, _ := os.ReadDir(w.victimRoot)
	if len(entries) != 1 {
		t.Errorf("victim's folder has %d entries, want 1", len(entries))
	}
	if b, err := os.ReadFile(w.envFile); err != nil || !strings.Contains(string(b), "sk-server-secret") {
		t.Errorf("server .env changed: %q, %v", b, err)
	}
}

func wantErrno(t *testing.T, what string, err error, want syscall.Errno) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: got %v, want %v", what, err, want)
	}
}

// noSecret fails if content holds a secret of the world.
func noSecret(t *testing.T, what string, content []byte) {
	t.Helper()
	if strings.Contains(string(content), "secret") {
		t.Errorf("%s read %q: a secret leaked", what, content)
	}
}

// TestEscapesFromHost attacks through the thread's mount path, as a process
// on the host given that path would.
func TestEscapesFromHost(t *testing.T) {
	w := newEscapeWorld(t)
	a := w.agent

	t.Run("symlinks that lead out are not made", func(t *testing.T) {
		rel, err := filepath.Rel(a, filepath.Join(w.victim, "secret"))
		must(t, err)
		for _, target := range []string{
			filepath.Join(w.victim, "secret"), // absolute, into the other thread
			w.envFile,                         // absolute, to the server's secrets
			rel,                               // ../../globex/victim/secret
			"../.env",
			"sub/../../x",
		} {
			err := os.Symlink(target, filepath.Join(a, "l"))
			wantErrno(t, "symlink "+target, err, syscall.EPERM)
			os.Remove(filepath.Join(a, "l"))
		}
	})

	t.Run("links planted in the backing folder are refused", func(t *testing.T) {
		rel, err := filepath.Rel(w.agentRoot, filepath.Join(w.victimRoot, "secret"))
		must(t, err)
		plants := map[string]string{
			"p-abs":    filepath.Join(w.victimRoot, "secret"),
			"p-rel":    rel,
			"p-env":    w.envFile,
			"p-dir":    w.victimRoot,
			"p-parent": "..",
		}
		for name, target := range plants {
			must(t, os.Symlink(target, filepath.Join(w.agentRoot, name)))
		}
		for name := range plants {
			_, err := os.Readlink(filepath.Join(a, name))
			wantErrno(t, "readlink "+name, err, syscall.EPERM)
			// The host's view is nosymfollow: no link is followed.
			b, err := os.ReadFile(filepath.Join(a, name))
			wantErrno(t, "read through "+name, err, syscall.ELOOP)
			noSecret(t, name, b)
		}
		_, err = os.ReadFile(filepath.Join(a, "p-dir", "secret"))
		wantErrno(t, "read p-dir/secret", err, syscall.ELOOP)
		err = os.WriteFile(filepath.Join(a, "p-abs"), []byte("overwrite"), 0o644)
		if err == nil {
			t.Errorf("writing through a planted link succeeded")
		}
	})

	t.Run("a symlink swapped in during lookups never leads out", func(t *testing.T) {
		must(t, os.MkdirAll(filepath.Join(w.agentRoot, "real"), 0o755))
		must(t, os.WriteFile(filepath.Join(w.agentRoot, "real", "secret"), []byte("own file"), 0o644))
		swap := filepath.Join(w.agentRoot, "swap")
		must(t, os.Symlink("real", swap))
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			tmp := filepath.Join(w.agentRoot, "swap.tmp")
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				target := "real"
				if i%2 == 1 {
					target = w.victimRoot
				}
				os.Remove(tmp)
				if os.Symlink(target, tmp) == nil {
					os.Rename(tmp, swap)
				}
			}
		}()
		reads := 0
		for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
			if b, err := os.ReadFile(filepath.Join(a, "swap", "secret")); err == nil {
				reads++
				if string(b) != "own file" {
					t.Errorf("read %q through a swapped link", b)
					break
				}
			}
		}
		close(stop)
		wg.Wait()
		t.Logf("%d reads went through the swapping name, none outside", reads)
	})

	t.Run("a rename that moves a link out is refused", func(t *testing.T) {
		must(t, os.MkdirAll(filepath.Join(a, "x", "y"), 0o755))
		must(t, os.Symlink("../../z", filepath.Join(a, "x", "y", "l"))) // /z: inside
		err := os.Rename(filepath.Join(a, "x", "y", "l"), filepath.Join(a, "moved"))
		wantErrno(t, "rename x/y/l to /moved", err, syscall.EPERM)
		err = os.Rename(filepath.Join(a, "x", "y", "l"), filepath.Join(a, "x", "moved"))
		wantErrno(t, "rename x/y/l to /x/moved", err, syscall.EPERM)
	})

	t.Run(".. through a symlinked directory is refused", func(t *testing.T) {
		must(t, os.MkdirAll(filepath.Join(a, "d", "e"), 0o755))
		must(t, os.Symlink("..", filepath.Join(a, "d", "up"))) // the root: allowed
		must(t, os.Symlink("e", filepath.Join(a, "d", "down")))
		for _, target := range []string{"d/up/..", "d/up/../globex", "d/down/../../.."} {
			err := os.Symlink(target, filepath.Join(a, "dd"))
			wantErrno(t, "symlink "+target, err, syscall.EPERM)
		}
		// The same, planted behind the filesystem's back.
		must(t, os.Symlink("d/up/../globex/victim/secret", filepath.Join(w.agentRoot, "dd-planted")))
		_, err := os.Readlink(filepath.Join(a, "dd-planted"))
		wantErrno(t, "readlink dd-planted", err, syscall.EPERM)
		b, err := os.ReadFile(filepath.Join(a, "dd-planted"))
		wantErrno(t, "read dd-planted", err, syscall.ELOOP)
		noSecret(t, "dd-planted", b)
	})

	t.Run("a hard link cannot bring a file in", func(t *testing.T) {
		err := os.Link(filepath.Join(w.victim, "secret"), filepath.Join(a, "stolen"))
		wantErrno(t, "link from the other thread's mount", err, syscall.EXDEV)
		err = os.Link(w.envFile, filepath.Join(a, "stolen-env"))
		wantErrno(t, "link of the server's .env", err, syscall.EXDEV)
	})

	w.sameOutside(t)
	// Every refusal was logged with the thread and the path.
	if logs := w.d.allLogs(); !strings.Contains(logs, "refused") || !strings.Contains(logs, "acme/agent") {
		t.Errorf("refusals are not logged with the thread:\n%s", logs)
	}
}

// TestEscapesThroughInspectionMount attacks through `warren mount`: the
// read-only view refuses writes and planted links; the --rw view refuses
// links that lead out.
func TestEscapesThroughInspectionMount(t *testing.T) {
	w := newEscapeWorld(t)
	must(t, os.Symlink(filepath.Join(w.victimRoot, "secret"), filepath.Join(w.agentRoot, "planted")))
	must(t, os.WriteFile(filepath.Join(w.agent, "file"), []byte("agent data"), 0o644))

	ro := filepath.Join(t.TempDir(), "ro")
	must(t, os.Mkdir(ro, 0o755))
	w.d.mustWarren("mount", "--tenant", "acme", "--thread", "agent", ro)
	t.Cleanup(func() { w.d.warren("umount", ro) })
	if b, err := os.ReadFile(filepath.Join(ro, "file")); err != nil || string(b) != "agent data" {
		t.Fatalf("inspection mount reads %q, %v", b, err)
	}
	_, err := os.Readlink(filepath.Join(ro, "planted"))
	wantErrno(t, "readlink planted link through the inspection mount", err, syscall.EPERM)
	b, err := os.ReadFile(filepath.Join(ro, "planted"))
	wantErrno(t, "read planted link through the inspection mount", err, syscall.ELOOP)
	noSecret(t, "planted via inspection", b)
	wantErrno(t, "write through a read-only inspection mount",
		os.WriteFile(filepath.Join(ro, "file"), []byte("x"), 0o644), syscall.EROFS)
	wantErrno(t, "symlink in a read-only inspection mount",
		os.Symlink("/etc/passwd", filepath.Join(ro, "l")), syscall.EROFS)

	rw := filepath.Join(t.TempDir(), "rw")
	must(t, os.Mkdir(rw, 0o755))
	w.d.mustWarren("mount", "--tenant", "acme", "--thread", "agent", "--rw", rw)
	t.Cleanup(func() { w.d.warren("umount", rw) })
	wantErrno(t, "absolute symlink through the --rw inspection mount",
		os.Symlink(filepath.Join(w.victimRoot, "secret"), filepath.Join(rw, "l")), syscall.EPERM)
	wantErrno(t, "climbing symlink through the --rw inspection mount",
		os.Symlink("../../globex/victim/secret", filepath.Join(rw, "l")), syscall.EPERM)
	// A write through the inspection mount shows in the thread's mount.
	must(t, os.WriteFile(filepath.Join(rw, "from-inspection"), []byte("hello"), 0o644))
	if b, err := os.ReadFile(filepath.Join(w.agent, "from-inspection")); err != nil || string(b) != "hello" {
		t.Errorf("thread mount reads %q, %v after a write through the inspection mount", b, err)
	}
	w.d.mustWarren("umount", rw)
	w.d.mustWarren("umount", ro)
	if len(testenv.MountsUnder(t, ro)) != 0 || len(testenv.MountsUnder(t, rw)) != 0 {
		t.Errorf("inspection mounts left after umount")
	}
	w.sameOutside(t)
}
