package threads

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"warren/jail"
	"warren/meta"
)

// TestHomeIsMadeOutsideTheWorkspace: a bind makes the thread's home in
// the workspaces folder's HomesDir, not in its workspace: the jail's
// user's, mode 0700, below folders only root reaches; what is in it stays
// across a close and a bind; a home gone since is made again for the
// jail (Home), and HomeOf names it.
func TestHomeIsMadeOutsideTheWorkspace(t *testing.T) {
	e := newRoom(t)
	ctx := context.Background()
	k := meta.ThreadKey{Tenant: "acme", Thread: "t"}
	root, _ := e.paths(t, k)
	home := filepath.Join(e.ws, HomesDir, "acme", "t")
	if _, err := e.th.Bind(ctx, "acme", "t"); err != nil {
		t.Fatal(err)
	}
	checkOwned := func(p string, uid uint32, mode os.FileMode) {
		t.Helper()
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		if got := os.FileMode(st.Mode & 0o7777); st.Mode&syscall.S_IFMT != syscall.S_IFDIR || st.Uid != uid || st.Gid != uid || got != mode {
			t.Errorf("%s: mode %o %v, owner %d:%d; want a folder, %v, %d:%d", p, st.Mode&syscall.S_IFMT, got, st.Uid, st.Gid, mode, uid, uid)
		}
	}
	checkOwned(home, jail.NobodyID, 0o700)
	checkOwned(filepath.Dir(home), 0, 0o700)
	checkOwned(filepath.Dir(filepath.Dir(home)), 0, 0o700)
	if strings.HasPrefix(home, root+"/") {
		t.Fatalf("the home %s is in the workspace %s", home, root)
	}
	b, err := e.store.GetBinding(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := e.th.HomeOf(b); err != nil || got != home {
		t.Errorf("HomeOf = %q, %v; want %q", got, err, home)
	}

	if err := os.WriteFile(filepath.Join(home, "kept"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := e.th.CloseThread(ctx, "acme", "t"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.th.Bind(ctx, "acme", "t"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(home, "kept")); err != nil {
		t.Errorf("the home's file after a close and a bind: %v", err)
	}
	if ents, err := os.ReadDir(root); err != nil || len(ents) != 0 {
		t.Errorf("the workspace holds %v (%v); want nothing", ents, err)
	}

	// Removed by hand: the jail's start makes it again.
	if err := os.RemoveAll(home); err != nil {
		t.Fatal(err)
	}
	unlock, err := e.th.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.th.Home(k, b)
	unlock()
	if err != nil || got != home {
		t.Fatalf("Home = %q, %v; want %q", got, err, home)
	}
	checkOwned(home, jail.NobodyID, 0o700)
}

// TestHomeRefusesALink: a link in the way of a home (its tenant's folder,
// or the home itself) fails the bind, and nothing is made where it
// points; the bind's workspace goes with its undo.
func TestHomeRefusesALink(t *testing.T) {
	e := newRoom(t)
	ctx := context.Background()
	outside := t.TempDir()
	homes := filepath.Join(e.ws, HomesDir)
	if err := os.MkdirAll(filepath.Join(homes, "other"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ tenant, link string }{
		{"acme", filepath.Join(homes, "acme")},
		{"other", filepath.Join(homes, "other", "t")},
	} {
		if err := os.Symlink(outside, c.link); err != nil {
			t.Fatal(err)
		}
		_, err := e.th.Bind(ctx, c.tenant, "t")
		if err == nil || !strings.Contains(err.Error(), "is a link") {
			t.Errorf("bind of %s/t with a link at %s: %v; want a refusal", c.tenant, c.link, err)
		}
		if ents, _ := os.ReadDir(outside); len(ents) != 0 {
			t.Errorf("a bind made %v where the link %s points", ents, c.link)
		}
		if root, _ := e.paths(t, meta.ThreadKey{Tenant: c.tenant, Thread: "t"}); exists(root) {
			t.Errorf("the refused bind left its workspace %s", root)
		}
	}
}
