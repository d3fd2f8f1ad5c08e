package gateway

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"warren/fs"
)

// stuckWait bounds how long a start waits for a stuck former daemon to let
// go of the store once its mounts' connections are aborted.
const stuckWait = 30 * time.Second

// RecoverStuck frees the data folder from a former daemon that was killed
// but could not die: a zombie whose thread waits for a FUSE answer from a
// mount the daemon served itself. Such a process keeps every descriptor:
// the store's directory lock (a start is refused), and /dev/fuse (its
// mounts hang instead of failing). Only aborting the connection frees it.
//
// It runs before the store is opened. It acts only if the store's lock is
// held by a process that was killed and has not ended (a zombie main
// thread, or a SIGKILL pending; a live daemon is left alone: the
// store then refuses this start with its own message). It aborts the
// connection of, and detaches, every warren mount under dataDir, and
// waits for the lock to be let go.
func RecoverStuck(ctx context.Context, log hclog.Logger, dataDir string) error {
	metaDir := MetaDir(dataDir)
	raw, err := os.ReadFile(filepath.Join(metaDir, "LOCK"))
	if err != nil {
		return nil // no store yet, or no holder written
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || pid <= 1 || pid == os.Getpid() {
		return nil
	}
	if held, err := lockHeld(metaDir); err != nil || !held {
		return err
	}
	if !killedButAlive(pid) {
		return nil
	}
	log.Warn("the former daemon is stuck (killed, not ended, holding the store): aborting the connections of its mounts", "pid", pid, "data", dataDir)
	ms, derr := fs.DetachUnder(dataDir)
	for _, m := range ms {
		log.Warn("aborted and detached a mount of the stuck daemon", "path", m.Path, "connection", m.Dev)
	}
	if derr != nil {
		log.Error("abort the stuck daemon's mounts", "error", derr)
	}
	ctx, cancel := context.WithTimeout(ctx, stuckWait)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		held, err := lockHeld(metaDir)
		if err != nil {
			return err
		}
		if !held {
			log.Info("the stuck daemon let go of the store", "pid", pid)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the former daemon (pid %d) was killed and still holds the store %s after its mounts' connections were aborted: "+
				"it may wait on a mount outside the data folder; abort it through %s: %w", pid, metaDir, "/sys/fs/fuse/connections/N/abort", ctx.Err())
		case <-tick.C:
		}
	}
}

// lockHeld reports whether another process holds the store's directory
// lock (Badger's flock on its folder).
func lockHeld(dir string) (bool, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("open %s: %w", dir, err)
	}
	defer unix.Close(fd)
	err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("lock %s: %w", dir, err)
	}
	unix.Flock(fd, unix.LOCK_UN)
	return false, nil
}

// killedButAlive reports whether process pid was killed and has not ended:
// its main thread is a zombie (another thread is left), or a SIGKILL is
// pending that it cannot act on (the thread waits uninterruptibly).
func killedButAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch k {
		case "State":
			if strings.HasPrefix(v, "Z") {
				return true
			}
		case "SigPnd", "ShdPnd":
			if mask, err := strconv.ParseUint(v, 16, 64); err == nil && mask&(1<<(uint(unix.SIGKILL)-1)) != 0 {
				return true
			}
		}
	}
	return false
}
