package snapshot

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// Making spread objects durable, off the builds' path. The rule: up to
// parallelSyncMax objects are fsync'ed, syncWorkers at a time, with their
// fan-out folders (a rename is durable once its folder is); more, one
// syncfs of the repository's filesystem.
//
// Measured on this project's machines (ext4 on a virtual disk, 2 cores,
// BenchmarkMakeDurable, noisy): 1 object and its folder 0.55 to 0.95 ms;
// 10 objects 4 to 6 ms; 32 objects 10 to 18 ms (parallel fsyncs overlap
// only partly: each waits for a journal commit); syncfs 3.5 to 5 ms with
// little else dirty. syncfs flushes everything dirty on the filesystem,
// which the workspaces share: an agent writing a big build output makes
// it cost as much as writing that out. That is why no build waits for
// one; the spreader may, and it uses syncfs only where fsyncs would cost
// more than a busy syncfs: after a big build, whose objects would take
// seconds to fsync one by one.
const (
	parallelSyncMax = 32
	syncWorkers     = 8
)

// durableSet is the objects a spreader pass placed, or found in place,
// which must be durable before their logs go. One goroutine uses it.
type durableSet struct {
	objects map[Hash]struct{}
}

func (ds *durableSet) add(h Hash) {
	if ds.objects == nil {
		ds.objects = make(map[Hash]struct{})
	}
	ds.objects[h] = struct{}{}
}

// makeDurable makes the objects of ds durable: the files' content and
// their names in the fan-out folders. Objects found in place are
// included: one may have been placed by another spreader that has not
// made it durable yet (its log is still there, but may go before this
// one's). It returns when all are, or at the first failure (after the
// fsyncs already started ended).
func (r *Repo) makeDurable(ds *durableSet) error {
	if len(ds.objects) == 0 {
		return nil
	}
	if len(ds.objects) > parallelSyncMax {
		return r.syncfs()
	}
	return r.fsyncObjects(ds)
}

// syncfs makes everything of the repository's filesystem durable.
func (r *Repo) syncfs() error {
	if err := unix.Syncfs(r.dirFd); err != nil {
		return fmt.Errorf("syncfs %s: %w", r.dir, err)
	}
	return nil
}

// fsyncObjects fsyncs the objects of ds and their fan-out folders,
// syncWorkers at a time.
func (r *Repo) fsyncObjects(ds *durableSet) error {
	paths := make([]string, 0, 2*len(ds.objects))
	folders := make(map[byte]bool)
	for h := range ds.objects {
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
	for _, p := range paths {
		jobs <- p
	}
	close(jobs)
	wg.Wait()
	close(errs)
	var err error
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
	if err := fsyncFd(fd); err != nil {
		return fmt.Errorf("fsync %s: %w", path, err)
	}
	return nil
}

// fsyncFd fsyncs the descriptor fd.
func fsyncFd(fd int) error {
	for {
		err := unix.Fsync(fd)
		if err != unix.EINTR {
			return err
		}
	}
}

// fdatasync makes the content of the file fd durable, with what is
// needed to read it back (its size), but not its times.
func fdatasync(fd int) error {
	for {
		err := unix.Fdatasync(fd)
		if err != unix.EINTR {
			return err
		}
	}
}
