package snapshot

import (
	"context"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// Making a build's objects durable. Measured on this project's machines
// (ext4 on a virtual disk, 2 cores): an fsync of one new small object
// costs about 1 ms, of its fan-out folder about 0.5 ms, and they overlap
// well when issued in parallel; a syncfs of the repository's filesystem
// costs about 2.5 ms when little else is dirty, but grows with whatever
// else is (the workspaces may share the disk). So a build with up to
// parallelSyncMax objects to make durable fsyncs them and their folders,
// syncWorkers at a time, and a bigger one calls syncfs once.
const (
	parallelSyncMax = 32
	syncWorkers     = 8
)

// makeDurable makes the objects of ws durable: the files' content and
// their names in the fan-out folders. It returns when all are, or at the
// first failure (after the fsyncs already started ended).
func (r *Repo) makeDurable(ctx context.Context, ws *writeSet) error {
	if len(ws.sync) == 0 {
		return nil
	}
	if len(ws.sync) > parallelSyncMax {
		if err := unix.Syncfs(r.dirFd); err != nil {
			return fmt.Errorf("syncfs %s: %w", r.dir, err)
		}
		return nil
	}
	paths := make([]string, 0, 2*len(ws.sync))
	folders := make(map[byte]bool)
	for h := range ws.sync {
		paths = append(paths, r.objectPath(h))
		if !folders[h[0]] {
			folders[h[0]] = true
			paths = append(paths, fmt.Sprintf("%s/%02x", r.objects, h[0]))
		}
	}
	jobs := make(chan string)
	errs := make(chan error, len(paths))
	var wg sync.WaitGroup
	for range min(syncWorkers, len(paths)) {
		wg.Go(func() {
			for p := range jobs {
				errs <- fsyncPath(p)
			}
		})
	}
	var err error
	for _, p := range paths {
		if err = ctx.Err(); err != nil {
			break
		}
		jobs <- p
	}
	close(jobs)
	wg.Wait()
	close(errs)
	for e := range errs {
		if err == nil {
			err = e
		}
	}
	return err
}

// fsyncPath opens path (a file or a folder) and fsyncs it.
func fsyncPath(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s for fsync: %w", path, err)
	}
	defer unix.Close(fd)
	if err := unix.Fsync(fd); err != nil {
		return fmt.Errorf("fsync %s: %w", path, err)
	}
	return nil
}
