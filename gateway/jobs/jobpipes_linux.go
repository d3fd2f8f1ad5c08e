package jobs

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// Reading a spawned job's two output pipes in the order they were written.
//
// A job's stdout and stderr are two pipes (jobWriter), so that a reader
// can tell them apart; the merged view (jobstreams.go) then has only the
// order in which the gateway read them. Two goroutines, one per pipe,
// would race for it: a shell that writes "Terminated" to stderr and then
// "bye" to stdout, microseconds apart, could be kept as "bye" first. So
// one goroutine reads both, through an epoll instance of the job's own
// that watches both pipes, edge-triggered: the kernel queues a pipe on the
// instance's ready list when data comes to it, in that order, and
// epoll_wait hands them back in it. Each ready pipe is read to its end in
// turn. The order kept is exact for writes that a read separates; writes
// to both pipes while the reader is away come pipe by pipe, in the order
// each pipe was first written (the ready list holds a pipe once).
//
// The pipes are watched before the command starts (jail.Cmd.Watch), so
// the order holds from the first byte. The epoll instance waits in the
// runtime's poller (it is readable while its ready list is not empty), so
// a job waiting for output holds no thread and no buffer: the batch
// buffer comes from jobReadBufs for a read only (jobWriter.ReadFrom).
//
// jail.Run copies each stream in a goroutine of its own, through
// jobWriter.ReadFrom; the first to come reads both pipes, and the other
// waits for the end of both. Run closes the pipes only once both copies
// returned, so no descriptor is closed while the reader uses it.

// jobPipes reads one job's output pipes (see above). Make one per job
// with newJobPipes, give its watch to jail.Cmd.Watch and close it once
// jail.Run returned.
type jobPipes struct {
	// ep is the epoll instance (epfd), in the runtime's poller; nil if
	// the system refused one.
	ep        *os.File
	epfd      int
	closeOnce sync.Once
	done      chan struct{} // closed when both pipes reached their end

	mu sync.Mutex
	// fds are the pipes' descriptors by stream, set by watch; ended[s]
	// says stream s's pipe reached its end.
	fds   [2]int
	ended [2]bool
	// watched says both pipes are watched: without it, each copy reads
	// its own pipe, in no set order between them.
	watched bool
	reading bool // a goroutine reads the pipes: the first copy to come
}

// newJobPipes returns the pipe reader of one job; log tells why it
// cannot keep the order between the streams, if it cannot.
func newJobPipes(log hclog.Logger) *jobPipes {
	p := &jobPipes{done: make(chan struct{}), fds: [2]int{-1, -1}, epfd: -1}
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err == nil {
		// Non-blocking, so that the runtime's poller takes it.
		if err = unix.SetNonblock(fd, true); err != nil {
			unix.Close(fd)
		}
	}
	if err != nil {
		log.Warn("the streams of a job's output are read apart, in no set order between them", "error", err)
		return p
	}
	p.ep, p.epfd = os.NewFile(uintptr(fd), "job-output-epoll"), fd
	return p
}

// Close lets go of the epoll instance; the job's jail.Run must have
// returned.
func (p *jobPipes) Close() error {
	p.closeOnce.Do(func() {
		if p.ep != nil {
			p.ep.Close()
		}
	})
	return nil
}

// watch is jail.Cmd.Watch: it watches both pipes, before the command
// starts.
func (p *jobPipes) watch(stdout, stderr *os.File) {
	if p.ep == nil {
		return
	}
	var fds [2]int
	for i, f := range []*os.File{stdout, stderr} {
		fds[i] = -1
		// Not f.Fd(), which would make the pipe blocking.
		if rc, err := f.SyscallConn(); err == nil {
			rc.Control(func(fd uintptr) { fds[i] = int(fd) })
		}
	}
	var err error
	for i, fd := range fds {
		if fd < 0 {
			err = fmt.Errorf("the descriptor of the job's %s", streamID(i))
			break
		}
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLET, Fd: int32(fd)}
		if err = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
			if i == 1 {
				unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, fds[0], nil)
			}
			break
		}
	}
	if err != nil {
		return // each copy reads its own pipe
	}
	p.mu.Lock()
	p.fds, p.watched = fds, true
	p.mu.Unlock()
}

// readFrom is jobWriter.ReadFrom for the copy of one stream: ok false
// means the pipes are not watched together, and the caller reads its
// own. The first copy to come reads both pipes to their ends and returns
// how many bytes it read; the other waits for that and returns 0.
func (p *jobPipes) readFrom(w jobWriter, _ io.Reader) (n int64, ok bool) {
	p.mu.Lock()
	watched, reader := p.watched, !p.reading
	p.reading = true
	p.mu.Unlock()
	switch {
	case !watched:
		return 0, false
	case !reader:
		<-p.done
		return 0, true
	}
	defer close(p.done)
	return p.read(w), true
}

// read reads both pipes until both ended, and returns how many bytes it
// read.
func (p *jobPipes) read(w jobWriter) int64 {
	rc, err := p.ep.SyscallConn()
	if err != nil {
		w.js.log.Error("read a job's output", "job", ID(w.jb.seq), "error", err)
		return 0
	}
	var total int64
	var evs [2]unix.EpollEvent
	for !p.over() {
		var (
			ready []unix.EpollEvent
			werr  error
		)
		err := rc.Read(func(fd uintptr) bool {
			for {
				n, err := unix.EpollWait(int(fd), evs[:], 0)
				switch {
				case err == unix.EINTR:
					continue
				case err != nil:
					werr = err
					return true
				}
				ready = evs[:n]
				return n > 0
			}
		})
		if err == nil {
			err = werr
		}
		if err != nil {
			w.js.log.Error("read a job's output", "job", ID(w.jb.seq), "error", err)
			return total
		}
		read := int64(0)
		for _, ev := range ready {
			read += p.drain(w, int(ev.Fd))
		}
		total += read
		if read > 0 && read < jobReadShort {
			// Little came: wait a moment, so that the next round takes
			// a batch (jobWriter.ReadFrom).
			time.Sleep(jobReadPause)
		}
	}
	return total
}

// over says whether both pipes reached their end.
func (p *jobPipes) over() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ended[0] && p.ended[1]
}

// drain reads pipe fd until it is empty or ended, into its stream, and
// returns how many bytes it read. Edge-triggered, a pipe read short of
// empty would not be told again.
func (p *jobPipes) drain(w jobWriter, fd int) int64 {
	p.mu.Lock()
	s := stdoutStream
	if p.fds[stderrStream] == fd {
		s = stderrStream
	}
	p.mu.Unlock()
	out := jobWriter{w.js, w.jb, s, nil}
	buf := jobReadBufs.Get().(*[]byte)
	defer jobReadBufs.Put(buf)
	var total int64
	for {
		n, err := unix.Read(fd, *buf)
		if n > 0 {
			out.Write((*buf)[:n])
			total += int64(n)
		}
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return total
		case err != nil || n == 0:
			// Its end (or a failure, which ends it too).
			if err != nil {
				w.js.log.Warn("read a job's output", "job", ID(w.jb.seq), "stream", s.String(), "error", err)
			}
			unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, fd, nil)
			p.mu.Lock()
			p.ended[s] = true
			p.mu.Unlock()
			return total
		}
	}
}
