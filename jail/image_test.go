package jail

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/testenv"
)

// TestImageRoot: a jail on an image sees the image's files and not the
// host's, writes none of them, and gets the image's environment, its user
// named after the image's, and the files the jail makes for it.
func TestImageRoot(t *testing.T) {
	spec := imageSpec{name: "A", busybox: true, env: testImageEnv, user: "node", workDir: "/workspace/app"}
	img := newTestImage(t, spec)
	imagePasswd, err := os.ReadFile(filepath.Join(img.Root, "etc/passwd"))
	if err != nil {
		t.Fatal(err)
	}
	j, ws := startImageJail(t, img, Config{})
	if j.Shell() != shShell {
		t.Errorf("the shell of a busybox image: %q, want %s", j.Shell(), shShell)
	}
	env, err := EnvFor(img, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A command with no Dir starts in the image's WorkingDir, which lies
	// in the workspace; a missing one is not replaced.
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if code, err := j.Run(ctx, Cmd{Args: []string{"/bin/pwd"}, Env: env, Stdout: &out}); err == nil && code == 0 {
		t.Errorf("a command in the missing WorkingDir ran: %q", out.String())
	}
	app := filepath.Join(ws, "app")
	if err := os.Mkdir(app, 0o755); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code, err := j.Run(ctx, Cmd{Args: []string{"/bin/pwd"}, Env: env, Stdout: &out}); err != nil || code != 0 || out.String() != "/workspace/app\n" {
		t.Errorf("a command with no Dir on an image with WorkingDir %s: exit %d, %v, %q", img.WorkingDir, code, err, out.String())
	}
	check := func(line, want string) {
		t.Helper()
		code, out, errOut := runEnv(t, j, env, line)
		if code != 0 || out != want {
			t.Errorf("%s: exit %d, %q (%s); want %q", line, code, out, errOut, want)
		}
	}
	check(`cat /etc/warren-test-marker; grep NAME /etc/os-release`, "A\nNAME=\"warren test image A\"\n")
	check(`echo $HOME $FOO_VERSION $PATH; imgtool`, "/home/agent 1.2.3 /opt/tools/bin:/bin\nimgtool 1.2.3\n")
	// startJailWith set a secret in the test's (the server's) environment.
	check(`env | grep -c sk-server; true`, "0\n")
	check(`whoami; id -un; id -gn; id -u`, "node\nnode\nnode\n65534\n")
	// The image's root stays; its node (uid 1000) and nobody (uid 65534)
	// would have named the jail's user twice.
	check(`cat /etc/passwd`, "root:x:0:0:root:/root:/bin/sh\nnode:x:65534:65534::/home/agent:/bin/sh\n")
	check(`cat /etc/group`, "root:x:0:\nnode:x:65534:\n")
	check(`grep warren /etc/hosts`, "# warren: this jail's hosts\n127.0.1.1\twarren\n")
	if host, err := os.ReadFile("/etc/resolv.conf"); err == nil {
		check(`cat /etc/resolv.conf`, string(host))
	}
	for _, line := range []string{
		"test -e /usr/bin/python3", "test -e /usr/bin/git", "test -e /lib",
		"touch /x", "touch /etc/x", "touch /usr/x", "touch /usr/share/x", "touch /bin/x",
		"echo x >> /etc/passwd", "echo x >> /etc/os-release", "rm /etc/warren-test-marker", "chmod 777 /bin/busybox",
	} {
		if code, out, _ := runEnv(t, j, env, line); code == 0 {
			t.Errorf("%q succeeded in a jail on an image: %q", line, out)
		}
	}
	check(`echo w > /workspace/w && echo h > $HOME/h && cat /workspace/w $HOME/h`, "w\nh\n")
	if got, err := os.ReadFile(filepath.Join(img.Root, "etc/passwd")); err != nil || !bytes.Equal(got, imagePasswd) {
		t.Errorf("the image's passwd on the host: %q, %v; want it as it was", got, err)
	}
}

// TestImageHome: /home/agent is the host folder Config.Home, which
// outlives the jail and is the next jail's, or without one a tmpfs of
// the jail's user that dies with the jail; on either root.
func TestImageHome(t *testing.T) {
	forRoots(t, func(r testRoot) bool { return r.name != "bash" }, func(t *testing.T, r testRoot) {
		home := filepath.Join(t.TempDir(), "home")
		if err := os.Mkdir(home, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := GiveWorkspace(home); err != nil {
			t.Fatal(err)
		}
		cfg := r.on(t, Config{Home: home})
		first, ws := startJailWith(t, cfg)
		if code, _, errOut := run(t, first, `mkdir -p ~/.cache && echo kept > ~/.cache/f && stat -c %U ~`); code != 0 {
			t.Fatalf("write the home: exit %d: %s", code, errOut)
		}
		first.Close()
		if got, err := os.ReadFile(filepath.Join(home, ".cache/f")); err != nil || string(got) != "kept\n" {
			t.Errorf("the home's folder on the host holds %q, %v", got, err)
		}
		if entries, _ := os.ReadDir(ws); len(entries) != 0 {
			t.Errorf("the workspace holds %v: the home's files landed there", entries)
		}
		second, _ := startJailWith(t, cfg)
		if code, out, _ := run(t, second, `cat $HOME/.cache/f`); code != 0 || out != "kept\n" {
			t.Errorf("the next jail's home: exit %d, %q", code, out)
		}
		cfg.Home = ""
		own, _ := startJailWith(t, cfg)
		code, out, errOut := run(t, own, `ls -A $HOME | wc -l; stat -c '%u %a' $HOME; echo x > $HOME/f && grep -c ' /home/agent tmpfs ' /proc/mounts`)
		if code != 0 || out != "0\n65534 755\n1\n" {
			t.Errorf("a jail without a home: exit %d, %q, %s; want an empty tmpfs of its own", code, out, errOut)
		}
	})
}

// TestImageTwoAtOnce: two jails on two images run at once, each on its
// own.
func TestImageTwoAtOnce(t *testing.T) {
	var specs []imageSpec
	for _, r := range testRoots() {
		if r.image != nil {
			specs = append(specs, *r.image)
		}
	}
	jails := make([]*Jail, len(specs))
	var wg sync.WaitGroup
	for i, spec := range specs {
		img := sharedImage(t, spec)
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := based(Config{Workspace: t.TempDir(), Image: img})
			j, err := Start(context.Background(), cfg)
			if err != nil {
				t.Errorf("start on image %s: %v", spec.name, err)
				return
			}
			t.Cleanup(func() { j.Close() })
			jails[i] = j
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for i, j := range jails {
		want := specs[i].name + "\n"
		if specs[i].bash {
			want += "bash\n"
		}
		if code, out, _ := run(t, j, `cat /etc/warren-test-marker; test -x /bin/bash && echo bash; true`); code != 0 || out != want {
			t.Errorf("jail %d: exit %d, %q; want %q", i, code, out, want)
		}
	}
}

// TestImageShells: command lines run with bash where the root has it,
// else sh (and then never in sh's place: plain words go through sh too),
// else only plain words run and the rest is refused with ErrNoShell.
func TestImageShells(t *testing.T) {
	roots := testRoots()
	for _, c := range []struct {
		name  string
		image func(t *testing.T) *Image
		shell string
	}{
		{"bash", func(t *testing.T) *Image { return sharedImage(t, *roots[2].image) }, bashShell},
		{"sh", func(t *testing.T) *Image { return sharedImage(t, *roots[1].image) }, shShell},
		{"none", func(t *testing.T) *Image { return newTestImage(t, imageSpec{name: "none", busybox: true, noSh: true}) }, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			j, _ := startImageJail(t, c.image(t), Config{})
			if j.Shell() != c.shell {
				t.Fatalf("Shell() = %q, want %q", j.Shell(), c.shell)
			}
			env, _ := Env(nil, nil)
			script := func(line string) (int, string, error) {
				t.Helper()
				var out testenv.SyncBuffer
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				code, err := j.Run(ctx, Cmd{Script: line, Env: env, Stdout: &out, Stderr: &out})
				return code, out.String(), err
			}
			code, out, err := script("ls -d /bin")
			if err != nil || code != 0 || out != "/bin\n" {
				t.Errorf("plain words: exit %d, %v, %q", code, err, out)
			}
			code, out, err = script(`echo "$HOME" | cat`)
			switch c.shell {
			case "":
				if !errors.Is(err, ErrNoShell) || err.Error() != "jail: the image has neither /bin/bash nor /bin/sh: commands need a shell" {
					t.Errorf("a pipeline with no shell: exit %d, %v, %q; want ErrNoShell", code, err, out)
				}
				if code, out, err = script("nosuchprogram x"); code != 127 || err == nil {
					t.Errorf("plain words of no program with no shell: exit %d, %v, %q; want 127", code, err, out)
				}
			default:
				if err != nil || code != 0 || out != Home+"\n" {
					t.Errorf("a pipeline: exit %d, %v, %q", code, err, out)
				}
				// bash -c leaves SHLVL as it was (0 when unset) for the
				// program it execs in its place, busybox's sh sets 1: the
				// plain words ran through sh, not in its place.
				want := map[string]string{bashShell: "SHLVL=0\n", shShell: "SHLVL=1\n"}[c.shell]
				if code, out, err = script("env"); err != nil || code != 0 || !strings.Contains(out, want) {
					t.Errorf("env as plain words: exit %d, %v, %q; want %q", code, err, out, want)
				}
				if code, out, err = script("nosuchprogram x"); code != 127 || err != nil || !strings.Contains(out, "nosuchprogram") {
					t.Errorf("plain words of no program: exit %d, %v, %q; want the shell's 127", code, err, out)
				}
			}
		})
	}
}

// TestImageRefused: a jail on an image that lacks a mount point, holds a
// link where one should be, is not a folder, is given by a relative path
// or would be bounded by rlimits does not start; nor does one whose home
// is a link.
func TestImageRefused(t *testing.T) {
	spec := imageSpec{name: "A"} // it never runs a command
	for _, c := range []struct {
		name   string
		config func(t *testing.T, img *Image) Config
		want   string
	}{
		{"no /etc/hosts", func(t *testing.T, img *Image) Config {
			mustDo(t, os.Remove(filepath.Join(img.Root, "etc/hosts")))
			return Config{Image: img}
		}, "/etc/hosts"},
		{"/home/agent a link", func(t *testing.T, img *Image) Config {
			mustDo(t, os.Remove(filepath.Join(img.Root, "home/agent")))
			mustDo(t, os.Symlink("../etc", filepath.Join(img.Root, "home/agent")))
			return Config{Image: img}
		}, "/home/agent"},
		{"/etc a link", func(t *testing.T, img *Image) Config {
			etc := filepath.Join(img.Root, "etc")
			mustDo(t, os.Rename(etc, filepath.Join(img.Root, "etc2")))
			mustDo(t, os.Symlink("etc2", etc))
			return Config{Image: img}
		}, "/etc/"},
		{"/etc/passwd a folder", func(t *testing.T, img *Image) Config {
			mustDo(t, os.Remove(filepath.Join(img.Root, "etc/passwd")))
			mustDo(t, os.Mkdir(filepath.Join(img.Root, "etc/passwd"), 0o755))
			return Config{Image: img}
		}, "/etc/passwd"},
		{"a passwd too large", func(t *testing.T, img *Image) Config {
			mustDo(t, os.WriteFile(filepath.Join(img.Root, "etc/passwd"), bytes.Repeat([]byte("x:x:1:1::/:/bin/sh\n"), maxImageFile/10), 0o644))
			return Config{Image: img}
		}, "over"},
		{"the root a link", func(t *testing.T, img *Image) Config {
			link := filepath.Join(t.TempDir(), "link")
			mustDo(t, os.Symlink(img.Root, link))
			return Config{Image: &Image{Root: link}}
		}, "not a link"},
		{"a relative root", func(t *testing.T, img *Image) Config {
			return Config{Image: &Image{Root: "rootfs"}}
		}, "absolute"},
		{"rlimits", func(t *testing.T, img *Image) Config {
			return Config{Image: img, Rlimits: true}
		}, "needs a cgroup"},
		{"a relative home", func(t *testing.T, img *Image) Config {
			return Config{Image: img, Home: "home"}
		}, "absolute"},
		{"the home a link", func(t *testing.T, img *Image) Config {
			link := filepath.Join(t.TempDir(), "home")
			mustDo(t, os.Symlink(t.TempDir(), link))
			return Config{Image: img, Home: link}
		}, "not a link"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.config(t, newTestImage(t, spec))
			err := tryStart(t, cfg)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Start: %v; want an error about %q", err, c.want)
			}
		})
	}
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestImageMountsStayInTheJail: the jail's mounts over an image's mount
// points never reach the host, even where the image store's folder is a
// shared mount (systemd makes / shared): a clone of a shared mount would
// join its peer group, and carry them back.
func TestImageMountsStayInTheJail(t *testing.T) {
	testenv.RequireRoot(t)
	h := newHostMounts(t, t.TempDir()) // shared, with a peer group of its own
	img := newTestImageIn(t, h.top, imageSpec{name: "A", busybox: true})
	root := img.Root
	// A peer of the store's mount, as another namespace of the host would
	// hold one.
	peer := filepath.Join(t.TempDir(), "peer")
	mustDo(t, os.Mkdir(peer, 0o755))
	mustDo(t, unix.Mount(h.top, peer, "", unix.MS_BIND, ""))
	t.Cleanup(func() { unix.Unmount(peer, unix.MNT_DETACH) })
	ws := t.TempDir()
	mustDo(t, os.Chown(ws, NobodyID, NobodyID))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	j, startErr := Start(ctx, based(Config{Workspace: ws, Image: img}))
	// Looked at whether the start failed or not: one that failed half way
	// may have left mounts behind.
	ms, err := readMountinfo("/proc/thread-self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if within(m.dir, root) || within(m.dir, filepath.Join(peer, "rootfs")) {
			t.Errorf("a mount of the jail's reached the host: %s", m.dir)
		}
	}
	if startErr != nil {
		t.Fatal(startErr)
	}
	defer j.Close()
	if code, out, _ := run(t, j, `cat /etc/warren-test-marker; grep -c . /etc/passwd`); code != 0 || out != "A\n3\n" {
		t.Fatalf("the jail: exit %d, %q", code, out)
	}
}

func TestImageWorkDir(t *testing.T) {
	for _, c := range []struct {
		img  *Image
		want string
	}{
		{nil, Workspace},
		{&Image{}, Workspace},
		{&Image{WorkingDir: "/workspace"}, Workspace},
		{&Image{WorkingDir: "/workspace/app/"}, "/workspace/app"},
		{&Image{WorkingDir: "/workspace/a/../b"}, "/workspace/b"},
		{&Image{WorkingDir: "/workspace/../etc"}, Workspace},
		{&Image{WorkingDir: "/workspaces"}, Workspace},
		{&Image{WorkingDir: "/usr/src/app"}, Workspace},
		{&Image{WorkingDir: "workspace/app"}, Workspace},
		{&Image{WorkingDir: "/"}, Workspace},
	} {
		if got := c.img.WorkDir(); got != c.want {
			t.Errorf("WorkDir of %+v = %q, want %q", c.img, got, c.want)
		}
	}
}

func TestUserNames(t *testing.T) {
	for _, c := range []struct{ user, name, group string }{
		{"", "agent", "agent"},
		{"node", "node", "node"},
		{"node:staff", "node", "staff"},
		{"node:1000", "node", "node"},
		{"1000", "agent", "agent"},
		{"1000:1000", "agent", "agent"},
		{"1000:staff", "agent", "staff"},
		{"root", "root", "root"},
		{"a:b:c", "a", "a"}, // "b:c" is not a name
		{"bad\nname", "agent", "agent"},
		{"-x", "agent", "agent"},
		{"x.y-z_1", "x.y-z_1", "x.y-z_1"},
		{"toolongtoolongtoolongtoolongtoolo", "agent", "agent"},
	} {
		if name, group := userNames(c.user); name != c.name || group != c.group {
			t.Errorf("userNames(%q) = %q, %q; want %q, %q", c.user, name, group, c.name, c.group)
		}
	}
}

func TestPasswdAndGroupFiles(t *testing.T) {
	image := "root:x:0:0:root:/root:/bin/ash\n# a comment\nnobody:x:65534:65534:nobody:/:/sbin/nologin\nnode:x:1000:1000::/home/node:/bin/sh\ngames:x:5:60::/:/bin/sh" // no last newline
	got := string(passwdFile([]byte(image), "node", 65534, 65534, "/bin/bash"))
	want := "root:x:0:0:root:/root:/bin/ash\n# a comment\ngames:x:5:60::/:/bin/sh\nnode:x:65534:65534::/home/agent:/bin/bash\n"
	if got != want {
		t.Errorf("passwd:\n%s\nwant:\n%s", got, want)
	}
	got = string(groupFile([]byte("root:x:0:\nnogroup:x:65534:\nstaff:x:50:node\n"), "staff", 65534))
	want = "root:x:0:\nstaff:x:65534:\n"
	if got != want {
		t.Errorf("group:\n%s\nwant:\n%s", got, want)
	}
	if got := string(passwdFile(nil, "agent", 7, 8, "/bin/sh")); got != "agent:x:7:8::/home/agent:/bin/sh\n" {
		t.Errorf("passwd of an image without one: %q", got)
	}
}

func TestHostsFile(t *testing.T) {
	want := "# warren: this jail's hosts\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
	if got := string(hostsFile("box-1.local")); got != want+"127.0.1.1\tbox-1.local\n" {
		t.Errorf("hosts: %q", got)
	}
	if got := string(hostsFile("evil\n10.0.0.1 bank.example")); got != want {
		t.Errorf("hosts of a host name with a newline: %q", got)
	}
}
