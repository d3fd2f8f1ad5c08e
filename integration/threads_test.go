package integration

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"warren/api"
	"warren/client"
	"warren/internal/testenv"
)

// hostileIDs are thread ids a client might send to walk out of its folder
// or into another's. Each must get a folder of its own inside the base.
var hostileIDs = []string{
	"../other-tenant/t-1",
	"..",
	".",
	"a/b",
	`a\b`,
	"%2e%2e",
	"%2E%2E%2Fetc",
	"nul\x00byte",
	"раураl", // Cyrillic look-alikes
	"paypal", // the Latin original
	"．．",     // fullwidth dots
	"Fix-Login",
	"fix-login",
	strings.Repeat("x", 300),
	strings.Repeat("x", 299) + "y",
	"-rf",
	" spaced ",
	"new\nline",
}

func TestHostileIDsGetTheirOwnFolders(t *testing.T) {
	d := newDaemon(t)
	base := filepath.Join(d.data, "workspaces")
	seenMount := map[string]string{}
	seenRoot := map[string]string{}
	c := client.New(d.socket)
	defer c.CloseIdleConnections()
	for i, id := range hostileIDs {
		for _, tenant := range []string{"default", "../evil"} {
			// Through the API, as a harness binds: argv cannot carry NUL.
			br, err := c.Bind(context.Background(), tenant, id)
			if err != nil {
				t.Fatalf("bind %q/%q: %v", tenant, id, err)
			}
			b := br.Binding
			if b.Thread != id || b.Tenant != tenant {
				t.Errorf("bind %q/%q: record says %q/%q", tenant, id, b.Tenant, b.Thread)
			}
			if br.MountPath != b.MountPath {
				t.Errorf("bind %q/%q: mount path %q, record %q", tenant, id, br.MountPath, b.MountPath)
			}
			rel, err := filepath.Rel(base, b.Root)
			if err != nil || strings.HasPrefix(rel, "..") || strings.Count(rel, "/") != 1 {
				t.Errorf("thread %q/%q: root %q is not one folder two levels inside %q", tenant, id, b.Root, base)
			}
			key := tenant + "\x00" + id
			if other, ok := seenRoot[b.Root]; ok {
				t.Errorf("threads %q and %q share the folder %q", other, key, b.Root)
			}
			if other, ok := seenMount[b.MountPath]; ok {
				t.Errorf("threads %q and %q share the mount %q", other, key, b.MountPath)
			}
			seenRoot[b.Root], seenMount[b.MountPath] = key, key
			// The mount serves this thread's folder and no other.
			marker := filepath.Join(b.MountPath, "marker")
			must(t, os.WriteFile(marker, []byte(key), 0o644))
			got, err := os.ReadFile(filepath.Join(b.Root, "marker"))
			if err != nil || string(got) != key {
				t.Errorf("thread %d %q: marker in its folder is %q, %v", i, key, got, err)
			}
		}
	}
	// Nothing was made outside the base, beside it or above it.
	entries, err := os.ReadDir(d.data)
	must(t, err)
	for _, e := range entries {
		switch e.Name() {
		case "meta", "workspaces", "mnt", "snapshots", "images", "warren.sock", "events.log":
		default:
			t.Errorf("unexpected entry %q in the data folder", e.Name())
		}
	}
	out := d.mustWarren("ls", "--json")
	var list []json.RawMessage
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		var wrapped struct{ Bindings []json.RawMessage }
		if err2 := json.Unmarshal([]byte(out), &wrapped); err2 != nil {
			t.Fatalf("ls --json: %v / %v: %q", err, err2, out)
		}
		list = wrapped.Bindings
	}
	if len(list) != 2*len(hostileIDs) {
		t.Errorf("ls lists %d threads, want %d", len(list), 2*len(hostileIDs))
	}
}

// TestCLIHostileIDs binds the ids argv can carry through the CLI too.
func TestCLIHostileIDs(t *testing.T) {
	d := newDaemon(t)
	seen := map[string]string{}
	for _, id := range hostileIDs {
		if strings.ContainsRune(id, 0) {
			continue
		}
		mp := d.bind("default", id)
		if other, ok := seen[mp]; ok {
			t.Errorf("%q and %q share the mount %q", other, id, mp)
		}
		seen[mp] = id
	}
	if _, err := d.warren("bind", "--thread", ""); err == nil {
		t.Errorf("bind of an empty thread id succeeded")
	}
}

// TestRestartKeepsBindings stops the daemon cleanly and starts it again:
// every thread is bound and mounted again, with its files.
func TestRestartKeepsBindings(t *testing.T) {
	d := newDaemon(t)
	threads := []string{"one", "two", "../three"}
	mounts := map[string]string{}
	for _, th := range threads {
		mp := d.bind("acme", th)
		mounts[th] = mp
		must(t, os.WriteFile(filepath.Join(mp, "notes.txt"), []byte("kept "+th), 0o644))
	}
	d.stop()
	if got := testenv.MountsUnder(t, d.data); len(got) != 0 {
		t.Errorf("mounts left after a clean stop: %v", got)
	}
	d.start()
	for _, th := range threads {
		got, err := os.ReadFile(filepath.Join(mounts[th], "notes.txt"))
		if err != nil || string(got) != "kept "+th {
			t.Errorf("after restart, %s/notes.txt = %q, %v", th, got, err)
		}
		if mp := d.bind("acme", th); mp != mounts[th] {
			t.Errorf("after restart, bind %s gives %q, want %q", th, mp, mounts[th])
		}
	}
	if got := testenv.MountsUnder(t, filepath.Join(d.data, "mnt")); len(got) != len(threads) {
		t.Errorf("after restart, %d mounts under mnt, want %d: %v", len(got), len(threads), got)
	}
}

// TestKill9LeavesNoStaleMount kills the daemon as a crash would. Its mounts
// then answer ENOTCONN; a new start detaches them and serves every thread
// again, with one mount per thread.
func TestKill9LeavesNoStaleMount(t *testing.T) {
	d := newDaemon(t)
	a := d.bind("default", "crash-a")
	b := d.bind("t2", "crash-b")
	must(t, os.WriteFile(filepath.Join(a, "f"), []byte("a"), 0o644))
	must(t, os.WriteFile(filepath.Join(b, "f"), []byte("b"), 0o644))
	d.kill9()
	_, err := os.Stat(filepath.Join(a, "f"))
	if !crashedMountErr(err) {
		t.Errorf("after kill -9, stat in the mount gives %v, want ENOTCONN: the test did not leave a crashed mount", err)
	}
	d.start()
	for mp, want := range map[string]string{a: "a", b: "b"} {
		got, err := os.ReadFile(filepath.Join(mp, "f"))
		if err != nil || string(got) != want {
			t.Errorf("after restart, %s/f = %q, %v", mp, got, err)
		}
		must(t, os.WriteFile(filepath.Join(mp, "g"), []byte("new"), 0o644))
		n := 0
		for _, m := range testenv.MountsUnder(t, d.data) {
			if m == mp {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d mounts at %s after restart, want exactly 1", n, mp)
		}
	}
}

// TestCloseAndDelete: close keeps the folder and the record, delete
// removes both, and a closed thread binds again on its next use.
func TestCloseAndDelete(t *testing.T) {
	d := newDaemon(t)
	mp := d.bind("default", "lifecycle")
	must(t, os.WriteFile(filepath.Join(mp, "keep"), []byte("x"), 0o644))
	var b struct{ Root string }
	must(t, json.Unmarshal([]byte(d.mustWarren("bind", "--thread", "lifecycle", "--json")), &b))
	d.mustWarren("close", "--thread", "lifecycle")
	if len(testenv.MountsUnder(t, mp)) != 0 {
		t.Errorf("closed thread still mounted")
	}
	if _, err := os.Stat(filepath.Join(b.Root, "keep")); err != nil {
		t.Errorf("close lost the folder: %v", err)
	}
	if out := d.mustWarren("ls"); !strings.Contains(out, "closed") {
		t.Errorf("ls after close does not say closed:\n%s", out)
	}
	if got := d.bind("default", "lifecycle"); got != mp {
		t.Errorf("bind after close gives %q, want %q", got, mp)
	}
	if _, err := os.Stat(filepath.Join(mp, "keep")); err != nil {
		t.Errorf("bind after close does not serve the old files: %v", err)
	}
	d.mustWarren("delete", "--thread", "lifecycle")
	if _, err := os.Stat(b.Root); !os.IsNotExist(err) {
		t.Errorf("delete left the folder: %v", err)
	}
	if len(testenv.MountsUnder(t, mp)) != 0 {
		t.Errorf("deleted thread still mounted")
	}
	if out := d.mustWarren("ls"); strings.Contains(out, "lifecycle") {
		t.Errorf("ls after delete still lists the thread:\n%s", out)
	}
}

// TestVanishedFolderIsGone: a bound thread whose folder was removed behind
// the gateway's back is refused as gone, not given a new empty folder.
func TestVanishedFolderIsGone(t *testing.T) {
	d := newDaemon(t)
	mp := d.bind("default", "vanish")
	var b struct{ Root string }
	must(t, json.Unmarshal([]byte(d.mustWarren("bind", "--thread", "vanish", "--json")), &b))
	must(t, os.WriteFile(filepath.Join(mp, "work"), []byte("x"), 0o644))
	d.stop()
	must(t, os.RemoveAll(b.Root))
	d.start()
	c := client.New(d.socket)
	defer c.CloseIdleConnections()
	_, err := c.Bind(context.Background(), "default", "vanish")
	if !errors.Is(err, api.ErrGone) {
		t.Fatalf("bind of a thread whose folder vanished: got %v, want ErrGone", err)
	}
	if !strings.Contains(err.Error(), "is gone, so the tools cannot work on it.") {
		t.Errorf("message %q does not say the workspace is gone", err)
	}
	if _, err := os.Stat(b.Root); !os.IsNotExist(err) {
		t.Errorf("an empty folder was made in place of the vanished one: %v", err)
	}
}

// TestKill9InspectionMountRestored kills the daemon while it serves an
// inspection mount: the next start detaches the dead mount (found without
// following links, through its own descriptor) and serves it again, once.
func TestKill9InspectionMountRestored(t *testing.T) {
	d := newDaemon(t)
	look := filepath.Join(t.TempDir(), "look")
	must(t, os.Mkdir(look, 0o755))
	t.Cleanup(func() { detachAllUnder(t, look) })
	mp := d.bind("default", "crash-i")
	must(t, os.WriteFile(filepath.Join(mp, "f"), []byte("i"), 0o644))
	d.mustWarren("mount", "--thread", "crash-i", look)
	d.kill9()
	if _, err := os.Stat(filepath.Join(look, "f")); !crashedMountErr(err) {
		t.Errorf("after kill -9, stat in the inspection mount gives %v, want ENOTCONN: the test did not leave a crashed mount", err)
	}
	d.start()
	if got, err := os.ReadFile(filepath.Join(look, "f")); err != nil || string(got) != "i" {
		t.Errorf("after restart, %s/f = %q, %v", look, got, err)
	}
	if got := testenv.MountsUnder(t, look); len(got) != 1 {
		t.Errorf("mounts at %s after restart: %v, want exactly 1", look, got)
	}
	d.mustWarren("umount", look)
	if got := testenv.MountsUnder(t, look); len(got) != 0 {
		t.Errorf("mounts at %s after umount: %v", look, got)
	}
}

// crashedMountErr tells the error of a request to a mount whose daemon was
// killed: ENOTCONN. Over FUSE over io_uring also ECONNABORTED or
// ECANCELED: the kernel lets go of the rings, and with them of the
// connection, only after the process is gone, and a request made in
// between is ended by the abort that follows (ECONNABORTED), or, handed
// to a ring entry of a worker already dead, cancelled (ECANCELED).
func crashedMountErr(err error) bool {
	if os.Getenv(testenv.TransportEnv) == "uring" && (errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.ECANCELED)) {
		return true
	}
	return errors.Is(err, syscall.ENOTCONN)
}
