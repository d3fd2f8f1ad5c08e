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
// BenchmarkMakeDurable, 20 rounds, noisy: other jobs share the disk):
//
//	objects   fsyncs    syncfs
//	1         1.8 ms    7.4 ms
//	10        5.2 ms    2.3 ms
//	32        8.8 ms    3.9 ms
//	100        21 ms    5.6 ms
//	1000      164 ms     34 ms
//
// So syncfs is cheaper on a quiet disk from about 10 objects on; but it
// flushes everything dirty on the filesystem, which the workspaces share:
// an agent writing a big build output makes it cost as much as writing
// that out, and fills the disk's queue in front of the builds' own log
// fsyncs. fsyncs cost only what the spreader wrote, so they are kept for
// the common pass (an agent's turn changes a few files: about 3 objects
// per file, with its folders); a big pass (a first build: 100,000
// objects would take 16 s of fsyncs) takes the syncfs.
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
