package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"warren/api"
	"warren/gateway/threads"
	"warren/internal/diskquota"
	"warren/internal/testenv"
	"warren/jail"
)

// The threads' homes (gateway/threads/home.go): what a command sees of
// its home from inside its jail, and the folders on the host.

// execIn runs command in thread acme/thread and returns its exit code and
// its output, stdout and stderr together.
func execIn(t *testing.T, ctx context.Context, env *testEnv, thread, command string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	code, err := env.c.Exec(ctx, "acme", thread, api.ExecRequest{Command: command}, &out, &out)
	if err != nil {
		t.Fatalf("exec %q in %s: %v", command, thread, err)
	}
	return code, out.String()
}

// writeAsJailUser writes n bytes of zeros into name in folder dir, as the
// jail's user: what a command writes into its home once the jail mounts
// it. The writer gets dir as an open descriptor, as a jail gets its
// mount, since the folders above it are root's alone.
func writeAsJailUser(t *testing.T, dir, name string, n int64) (string, error) {
	t.Helper()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command("sh", "-c", fmt.Sprintf("cd /proc/self/fd/3 && head -c %d /dev/zero > %s", n, name))
	cmd.ExtraFiles = []*os.File{f}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: jail.NobodyID, Gid: jail.NobodyID}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestHomeOnTheHost: a bound thread on btrfs has its home outside its
// workspace, a subvolume the jail's user owns (0700); the home's bytes
// count in the thread's quota (4 MiB: 3 in the workspace, written by a
// command, leave no room for 3 in the home, written by the jail's user);
// usage shows them apart; the checkpoints hold nothing of them; the home
// stays across a restart of the daemon, and goes with the thread's
// delete, as its quota group does (and a failed first bind's).
func TestHomeOnTheHost(t *testing.T) {
	mnt := testenv.LoopFS(t, 512*mib, "mkfs.btrfs", []string{"-q"}, "")
	cfg := Config{DataDir: filepath.Join(mnt, "data"), Store: newStore(t), DiskQuotaBytes: 4 * mib}
	env := startEnv(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A first bind that fails leaves no folder, and no thread's quota
	// group (of level 2).
	env.m.setFailMount(func(string) error { return errors.New("no mount") })
	if _, err := env.c.Bind(ctx, "acme", "failed"); err == nil {
		t.Fatal("a bind whose mount fails succeeded")
	}
	env.m.setFailMount(nil)
	if groups := threadGroups(t, mnt); len(groups) != 0 {
		t.Errorf("a failed bind left the quota groups %v", groups)
	}
	if _, err := os.Lstat(filepath.Join(env.g.wsBase, threads.HomesDir, "acme", "failed")); !os.IsNotExist(err) {
		t.Errorf("a failed bind left its home: %v", err)
	}
	if _, err := env.c.Bind(ctx, "acme", "t"); err != nil {
		t.Fatal(err)
	}
	if groups := threadGroups(t, mnt); len(groups) != 1 {
		t.Errorf("the quota groups of threads after a bind: %v; want one", groups)
	}
	home := filepath.Join(env.g.wsBase, threads.HomesDir, "acme", "t")
	var st syscall.Stat_t
	if err := syscall.Lstat(home, &st); err != nil {
		t.Fatalf("the thread's home: %v", err)
	}
	if st.Uid != jail.NobodyID || st.Gid != jail.NobodyID || st.Mode&0o7777 != 0o700 {
		t.Errorf("the home is %d:%d mode %o; want the jail's user's, 0700", st.Uid, st.Gid, st.Mode&0o7777)
	}
	if sub, err := diskquota.IsSubvolume(home); err != nil || !sub {
		t.Errorf("the home is a subvolume: %v, %v; want one, for the thread's quota group", sub, err)
	}

	writeRaw(t, ctx, env.c, "acme", "t", "a.txt", []byte("a\n"))
	if _, err := env.c.History().Checkpoint(ctx, "acme", "t", api.CheckpointRequest{}); err != nil {
		t.Fatal(err)
	}
	if code, out := execIn(t, ctx, env, "t", "head -c 3145728 /dev/zero > /workspace/ws.bin"); code != 0 {
		t.Fatalf("3 MiB in the workspace under a quota of 4: exit %d: %s", code, out)
	}
	syscall.Sync()
	if err := os.Mkdir(filepath.Join(home, ".cache"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(home, ".cache"), jail.NobodyID, jail.NobodyID); err != nil {
		t.Fatal(err)
	}
	out, err := writeAsJailUser(t, home, ".cache/big", 3*mib)
	if err == nil || !strings.Contains(out, "Disk quota exceeded") {
		t.Fatalf("3 MiB in the home beside 3 in the workspace, under a quota of 4: %v: %q; want EDQUOT", err, out)
	}
	if err := os.Remove(filepath.Join(home, ".cache", "big")); err != nil {
		t.Fatal(err)
	}
	if out, err := writeAsJailUser(t, home, ".cache/x", 256<<10); err != nil {
		t.Fatalf("256 KiB in the home: %v: %s", err, out)
	}

	u, err := env.c.Usage(ctx, "acme", "t")
	if err != nil {
		t.Fatal(err)
	}
	if u.HomeBytes != 256<<10 || u.HomeFiles != 2 || u.DiskBytes != 3*mib+2 || u.DiskQuotaBytes != 4*mib {
		t.Errorf("usage %+v; want the home's 256 KiB in 2 entries apart from the workspace's 3 MiB, under 4 MiB", u)
	}
	d, err := env.c.History().Diff(ctx, "acme", "t", "", "", false)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(d.Added, ",") != "ws.bin" || len(d.Modified)+len(d.Removed) != 0 {
		t.Errorf("the diff from the checkpoint: %+v; want ws.bin added, nothing of the home", d)
	}
	ls, err := env.c.Files().List(ctx, "acme", "t", api.ListRequest{Path: "."})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ls.Entries {
		if e.Name != "a.txt" && e.Name != "ws.bin" {
			t.Errorf("the workspace lists %q", e.Name)
		}
	}

	// A restart keeps it.
	if err := env.g.Close(); err != nil {
		t.Fatal(err)
	}
	env = startEnv(t, cfg)
	if fi, err := os.Stat(filepath.Join(home, ".cache", "x")); err != nil || fi.Size() != 256<<10 {
		t.Fatalf("the home's file after a restart: %v, %v", fi, err)
	}

	if err := env.c.DeleteThread(ctx, "acme", "t"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(home); !os.IsNotExist(err) {
		t.Errorf("the home of a deleted thread: %v; want it gone", err)
	}
	if groups := threadGroups(t, mnt); len(groups) != 0 {
		t.Errorf("the quota groups of threads after the delete: %v; want none", groups)
	}
}

// threadGroups lists the quota groups of level 2, the threads', on the
// btrfs at mnt, as btrfs-progs shows them.
func threadGroups(t *testing.T, mnt string) []string {
	t.Helper()
	testenv.RequireCommand(t, "btrfs")
	out, err := exec.Command("btrfs", "qgroup", "show", "--raw", mnt).Output()
	if err != nil {
		t.Fatalf("btrfs qgroup show: %v", err)
	}
	var groups []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "2/") {
			groups = append(groups, f[0])
		}
	}
	return groups
}

// TestHomeOfAnOlderThread: a thread bound before homes (its home removed
// here, its limit on its workspace's own quota group as before) gets its
// home at its mount when the daemon starts again, with its quota over
// both.
func TestHomeOfAnOlderThread(t *testing.T) {
	mnt := testenv.LoopFS(t, 512*mib, "mkfs.btrfs", []string{"-q"}, "")
	cfg := Config{DataDir: filepath.Join(mnt, "data"), Store: newStore(t), DiskQuotaBytes: 4 * mib}
	env := startEnv(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := env.c.Bind(ctx, "acme", "old"); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(env.g.wsBase, "acme", "old")
	home := filepath.Join(env.g.wsBase, threads.HomesDir, "acme", "old")
	writeRaw(t, ctx, env.c, "acme", "old", "ws.bin", make([]byte, 3*mib))
	if err := env.g.Close(); err != nil {
		t.Fatal(err)
	}
	// What an older warren left: no home, the limit on the workspace.
	fs, err := diskquota.Open(env.g.wsBase)
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.ForgetThread(root, home); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(home); err != nil {
		t.Fatal(err)
	}
	if err := fs.Limit(root, 4*mib); err != nil {
		t.Fatal(err)
	}

	env = startEnv(t, cfg)
	if _, err := os.Stat(home); err != nil {
		t.Fatalf("the older thread's home after a start: %v", err)
	}
	syscall.Sync()
	if limit, used, err := fs.ThreadLimit(root); err != nil || limit != 4*mib || used < 3*mib {
		t.Errorf("the older thread's group: limit %d, %d used (%v); want 4 MiB over its 3", limit, used, err)
	}
	out, err := writeAsJailUser(t, home, "big", 3*mib)
	if err == nil || !strings.Contains(out, "Disk quota exceeded") {
		t.Fatalf("3 MiB in the older thread's new home beside 3 in its workspace, under 4: %v: %q; want EDQUOT", err, out)
	}
}

// TestHomeInTheJail (needs package jail's homes): a command's HOME is
// /home/agent; what it writes there (a 1 MiB cache) is not in the
// workspace (the file API lists nothing new, the diff from a checkpoint
// is empty), is there for the next command, after the jail ended (the
// thread closed) and after a restart of the daemon, and goes with the
// thread's delete.
func TestHomeInTheJail(t *testing.T) {
	cfg := Config{Store: newStore(t)}
	env := startEnv(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	writeRaw(t, ctx, env.c, "acme", "t", "a.txt", []byte("a\n"))
	if _, err := env.c.History().Checkpoint(ctx, "acme", "t", api.CheckpointRequest{}); err != nil {
		t.Fatal(err)
	}
	code, out := execIn(t, ctx, env, "t", "mkdir -p ~/.cache && head -c 1M /dev/zero > ~/.cache/x && echo $HOME && env")
	if code != 0 || !strings.HasPrefix(out, "/home/agent\n") || !strings.Contains(out, "\nHOME=/home/agent\n") {
		t.Fatalf("a command writing its cache: exit %d: %s; want HOME=/home/agent", code, out)
	}
	ls, err := env.c.Files().List(ctx, "acme", "t", api.ListRequest{Path: "."})
	if err != nil || len(ls.Entries) != 1 || ls.Entries[0].Name != "a.txt" {
		t.Errorf("the workspace lists %+v (%v); want a.txt alone", ls.Entries, err)
	}
	d, err := env.c.History().Diff(ctx, "acme", "t", "", "", false)
	if err != nil || len(d.Added)+len(d.Modified)+len(d.Removed) != 0 {
		t.Errorf("the diff from the checkpoint: %+v (%v); want nothing", d, err)
	}
	want := func(when string) {
		t.Helper()
		if code, out := execIn(t, ctx, env, "t", "wc -c < ~/.cache/x"); code != 0 || strings.TrimSpace(out) != "1048576" {
			t.Errorf("%s: the cache reads %q (exit %d); want its 1048576 bytes", when, out, code)
		}
	}
	want("the next command")
	if _, err := env.c.CloseThread(ctx, "acme", "t"); err != nil {
		t.Fatal(err)
	}
	want("after the jail ended with the thread's close")
	if err := env.g.Close(); err != nil {
		t.Fatal(err)
	}
	env = startEnv(t, cfg)
	want("after a restart")
	home := filepath.Join(env.g.wsBase, threads.HomesDir, "acme", "t")
	if err := env.c.DeleteThread(ctx, "acme", "t"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(home); !os.IsNotExist(err) {
		t.Errorf("the home of a deleted thread: %v; want it gone", err)
	}
}

// TestHomeQuotaInTheJail (needs package jail's homes): a thread with a
// quota of 4 MiB writes 3 in its workspace, then cannot write 3 in its
// home.
func TestHomeQuotaInTheJail(t *testing.T) {
	mnt := testenv.LoopFS(t, 512*mib, "mkfs.btrfs", []string{"-q"}, "")
	env := startEnv(t, Config{DataDir: filepath.Join(mnt, "data"), DiskQuotaBytes: 4 * mib})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if code, out := execIn(t, ctx, env, "q", "head -c 3M /dev/zero > /workspace/a && sync"); code != 0 {
		t.Fatalf("3 MiB in the workspace under 4: exit %d: %s", code, out)
	}
	code, out := execIn(t, ctx, env, "q", "mkdir -p ~/.cache && head -c 3M /dev/zero > ~/.cache/b")
	if code == 0 || !strings.Contains(out, "Disk quota exceeded") {
		t.Fatalf("3 MiB in the home beside 3 in the workspace, under 4: exit %d: %s; want EDQUOT", code, out)
	}
}
