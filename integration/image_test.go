package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warren/internal/imagetest"
)

// toolFiles are the host's bash and perl (and the libraries they load)
// for a busybox image: the jail's escape suite needs both, and with bash
// the image's commands run under bash -c as on the host's folders.
func toolFiles(t *testing.T) []imagetest.File {
	t.Helper()
	tools, err := imagetest.HostPrograms(map[string]string{"bin/bash": "/bin/bash", "usr/bin/perl": "/usr/bin/perl"})
	if err != nil {
		t.Fatal(err)
	}
	// The locale warren's LANG names, as a Debian image has it.
	locale, err := imagetest.HostTree("usr/lib/locale/C.utf8", "/usr/lib/locale/C.utf8")
	if err != nil {
		t.Fatal(err)
	}
	return append(tools, locale...)
}

// TestImageJailEscapes: the jail's escape suite, from a thread whose root
// is an image: every way out fails as it does on the host's folders, the
// environment holds the image's variables and nothing of the server's,
// and the image's files cannot be written.
func TestImageJailEscapes(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	ref, _ := reg.Push(t, "team/escape:1", imagetest.Busybox(t, "escape", toolFiles(t)...))
	t.Setenv("OPENAI_API_KEY", "sk-server-secret")
	t.Setenv("DATABASE_URL", "postgres://server:secret@db/prod")
	d := newDaemon(t, "--jail-memory", "67108864", "--jail-procs", "128", "--registries", reg.Host)
	dotEnv := filepath.Join(filepath.Dir(d.data), ".env")
	must(t, os.WriteFile(dotEnv, []byte("OPENAI_API_KEY=sk-server-secret\n"), 0o644))
	d.mustWarren("bind", "--thread", "t1", "--image", ref)
	other := d.bind("default", "t2")
	must(t, os.WriteFile(filepath.Join(other, "theirs.txt"), []byte("other thread's file"), 0o644))

	// The tools the suite needs are the image's, and work.
	if code, out := d.execIn("t1", `echo "$BASH_VERSION" | grep -q . && perl -e 'print "perl\n"' && cat /marker`); code != 0 || out != "perl\nescape\n" {
		t.Fatalf("the image's bash and perl: exit %d, %q", code, out)
	}
	// The environment: warren's names and the image's, no secret.
	checkEnvNames(t, d, "t1", "AGENT GIT_CONFIG_COUNT GIT_CONFIG_KEY_0 GIT_CONFIG_KEY_1 GIT_CONFIG_VALUE_0 GIT_CONFIG_VALUE_1 HOME IMAGE_NAME LANG LC_ALL PATH PWD SHLVL TEMP TMP TMPDIR _")

	tryEscapes(t, d, "t1", dotEnv, other)

	// The image's own files are read-only, for every jail on it.
	for _, line := range []string{"touch /bin/warren-escape", "echo x >> /etc/passwd", "rm -f /marker", "chmod 777 /bin/busybox"} {
		if code, out := d.execIn("t1", line); code == 0 {
			t.Errorf("%q on the image's root: exit 0, %q", line, out)
		}
	}
	roots, _ := filepath.Glob(filepath.Join(d.data, "images", "roots", "*", "bin", "warren-escape"))
	if len(roots) > 0 {
		t.Errorf("a command wrote the image's root: %v", roots)
	}
}

// TestImagePullKill9: a daemon killed with -9 in the middle of a pull
// leaves no half image: after its restart the store lists nothing and
// holds no leftover, and the next pull finishes the image, which runs.
func TestImagePullKill9(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	ref, digest := reg.Push(t, "team/cut:1", imagetest.Busybox(t, "cut",
		imagetest.File{Path: "big", Body: strings.Repeat("c", 4<<20)}))
	d := newDaemon(t, "--registries", reg.Host)
	release := reg.HoldBlobs(t)
	pull := exec.Command(warrenBin, "image", "pull", ref)
	pull.Env = append(os.Environ(), "WARREN_SOCKET="+d.socket)
	must(t, pull.Start())
	pulled := make(chan error, 1)
	go func() { pulled <- pull.Wait() }()
	// Under way: the daemon is in the middle of a held blob.
	for deadline := time.Now().Add(time.Minute); reg.BlobGets() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the pull never fetched a blob")
		}
	}
	d.kill9()
	if err := <-pulled; err == nil {
		t.Error("warren image pull succeeded though its daemon was killed")
	}
	release()
	d.start()
	if out := d.mustWarren("image", "ls"); strings.Contains(out, "team/cut") {
		t.Errorf("after the restart, the store lists the image cut short:\n%s", out)
	}
	if left, _ := os.ReadDir(filepath.Join(d.data, "images", "tmp")); len(left) > 0 {
		t.Errorf("the pull cut short left %d entries in the store's tmp", len(left))
	}
	if roots, _ := filepath.Glob(filepath.Join(d.data, "images", "roots", "*")); len(roots) > 0 {
		t.Errorf("the pull cut short left roots: %v", roots)
	}
	if out := d.mustWarren("image", "pull", ref); !strings.Contains(out, digest) {
		t.Errorf("the next pull: %q; want the image's digest %s", out, digest)
	}
	d.mustWarren("bind", "--thread", "after", "--image", ref)
	if code, out := d.execIn("after", "cat /marker; wc -c < /big"); code != 0 || out != "cut\n4194304\n" {
		t.Errorf("the image pulled after the crash: exit %d, %q", code, out)
	}
}
