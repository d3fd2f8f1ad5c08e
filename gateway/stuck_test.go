package gateway

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/hashicorp/go-hclog"

	"warren/fs"
	"warren/internal/testenv"
	"warren/meta/badger"
)

// stuckChildEnv makes the test binary act as a daemon that got stuck (see
// TestMain): it holds the store of the data folder named by the variable,
// serves a mount under its mount folder, and waits on that very mount.
const stuckChildEnv = "WARREN_TEST_STUCK_CHILD_DATA"

// blockingRoot answers every lookup of "block" never.
type blockingRoot struct{ fusefs.Inode }

func (r *blockingRoot) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fusefs.Inode, syscall.Errno) {
	if name == "block" {
		os.Stdout.WriteString("blocked\n")
		select {}
	}
	return nil, syscall.ENOENT
}

// stuckChild is the stuck former daemon. It never returns on success.
func stuckChild(data string) int {
	ctx := context.Background()
	store, err := badger.Open(ctx, MetaDir(data), nil) // its lock
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		return 1
	}
	defer store.Close()
	mnt := filepath.Join(data, "mnt", "t", "x")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return 1
	}
	_, err = fusefs.Mount(mnt, &blockingRoot{}, &fusefs.Options{MountOptions: fuse.MountOptions{
		Name: "warren", FsName: "warren:t/x", DirectMount: true, DirectMountStrict: true,
	}})
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		return 1
	}
	// The request to its own mount: once its server read it, a kill
	// leaves this thread waiting for an answer no one will give.
	os.Stat(filepath.Join(mnt, "block"))
	select {}
}

// TestRecoverStuckFormerDaemon: a former daemon killed while one of its
// threads waited on its own mount stays a zombie holding the store's lock
// and its mounts (issue 12, item 1). RecoverStuck, run by `warren serve`
// before it opens the store, aborts the connection of the mounts under the
// data folder: the zombie ends, the store opens, no mount is left.
func TestRecoverStuckFormerDaemon(t *testing.T) {
	testenv.RequireRootFUSE(t)
	data := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), stuckChildEnv+"="+data)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		select {
		case <-done:
		case <-time.After(time.Second):
			fs.DetachUnder(data) // free it whatever happened
			<-done
		}
		fs.DetachUnder(data)
	})
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Scan()
		line <- sc.Text()
	}()
	select {
	case l := <-line:
		if l != "blocked" {
			t.Fatalf("stuck child said %q", l)
		}
	case <-done:
		t.Fatal("the stuck child ended before it blocked")
	case <-time.After(30 * time.Second):
		t.Fatal("the stuck child did not block within 30 s")
	}
	cmd.Process.Kill()
	// The state: killed, not ended, not reaped.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if killedButAlive(cmd.Process.Pid) {
			break
		}
		select {
		case <-done:
			t.Fatal("the killed child ended: it was not stuck")
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the killed child did not show as killed within 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if held, err := lockHeld(MetaDir(data)); err != nil || !held {
		t.Fatalf("the stuck child does not hold the store: %v, %v", held, err)
	}

	if err := RecoverStuck(context.Background(), hclog.NewNullLogger(), data); err != nil {
		t.Fatalf("RecoverStuck: %v", err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the stuck child is still not gone after RecoverStuck")
	}
	s, err := badger.Open(context.Background(), MetaDir(data), nil)
	if err != nil {
		t.Fatalf("open the store after RecoverStuck: %v", err)
	}
	s.Close()
	if ms, err := fs.MountsUnder(data); err != nil || len(ms) != 0 {
		t.Errorf("mounts left under the data folder: %v, %v", ms, err)
	}
}
