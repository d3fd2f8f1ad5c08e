package fs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"warren/internal/uring"
)

// This file serves a mount's FUSE connection over io_uring (Linux 6.14+,
// the fuse module's enable_uring on) instead of read(2) and writev(2) of
// /dev/fuse. go-fuse answers INIT, with FUSE_OVER_IO_URING asked for, and
// keeps the connection for what never goes over the rings (notifications,
// passthrough backing files); go-fuse's ProtocolServer, over the same
// RawFileSystem, serves the requests.
//
// The kernel has one queue per possible CPU and hands a request to the
// queue of the CPU its caller runs on, into any free entry of that queue.
// Each queue here has uringWorkers workers, each an OS thread with a ring
// of its own and one entry. A worker's thread alone submits on its ring,
// and it must: the kernel copies a request into an entry as task work of
// the thread that submitted the entry's command, run while that thread
// waits in io_uring_enter. So the worker serves the request itself,
// between waits: one submission answers it (COMMIT_AND_FETCH) and hands
// the entry back for the next, and one io_uring_enter sends the answer
// and waits. No read(2) and writev(2) per request.
//
// A worker busy with a request holds its only entry, so the kernel gives
// the queue's next requests to the other workers: a request whose serving
// waits for another request of the same connection (a notification waits
// for a page lock a READ holds) does not stop the queue, as one reader
// would. Still, four requests that each wait for one more stop a queue:
// so no request may wait without bound, and the one kind that does, a
// lock that waits (SETLKW), never comes, since mounts on the rings leave
// POSIX and flock locks to the kernel (serveNodes; see
// docs/experiments/fuse-over-io-uring.md for why they cannot be
// forwarded here). lockRequests counts any that would come all the same.
//
// What still comes through /dev/fuse (FORGET, BATCH_FORGET, INTERRUPT) is
// read by one more goroutine and served by the same ProtocolServer, so an
// INTERRUPT finds the request it names. When the connection ends (the
// mount is gone, or aborted), every entry's command completes with an
// error, the queues' threads end, and go-fuse's Serve, called last, finds
// the connection gone and closes /dev/fuse.
//
// The daemon's rule that it never makes a request to a mount it serves
// matters doubly here: a queue thread that did would wait for a copy only
// it can make, in a wait that nothing interrupts (the process stays in D
// state, also after SIGKILL).

// FUSE ABI of the io_uring transport (include/uapi/linux/fuse.h).
const (
	uringCmdRegister       = 1 // FUSE_IO_URING_CMD_REGISTER
	uringCmdCommitAndFetch = 2 // FUSE_IO_URING_CMD_COMMIT_AND_FETCH

	// struct fuse_uring_req_header: the in/out header, the operation's
	// own struct, then struct fuse_uring_ent_in_out.
	uringHeaderSize = 288
	uringOpInOff    = 128
	uringEntOff     = 256 // flags u64, commit_id u64, payload_sz u32

	inHeaderSize  = int(unsafe.Sizeof(fuse.InHeader{}))
	outHeaderSize = int(unsafe.Sizeof(fuse.OutHeader{}))

	opWrite     = 16
	opInit      = 26
	opGetlk     = 31
	opSetlk     = 32
	opSetlkw    = 33
	opInterrupt = 36
)

// Workers per kernel queue, each with one entry, and the room of each
// worker's submission queue (it never has more than one command queued).
const (
	uringWorkers   = 4
	uringSQEntries = 4
)

// errURingRefused wraps every reason the io_uring transport could not be
// set up for a mount (TransportAuto then serves it the classic way).
var errURingRefused = errors.New("FUSE over io_uring refused")

// uringServer serves one FUSE connection over io_uring.
type uringServer struct {
	fd      int // /dev/fuse; go-fuse's Server owns (and closes) it
	ps      *fuse.ProtocolServer
	log     hclog.Logger
	payload int // bytes of each entry's payload buffer
	workers []*uringQueue
	wg      sync.WaitGroup // the queues' threads and the /dev/fuse reader

	// ringRequests counts the requests that came over the rings, and
	// lockRequests those of them that were locks (none should: see the
	// top of this file).
	ringRequests, lockRequests atomic.Uint64
}

// uringQueue is one worker of a kernel queue: its thread, ring and
// entry.
type uringQueue struct {
	s      *uringServer
	qid    uint16
	ring   *uring.Ring
	ent    *uringEnt
	live   bool // the kernel holds the entry's command or will give it back
	failed error
}

// uringEnt is a ring entry: header and payload buffers, mapped off the
// Go heap since the kernel writes them at any time.
type uringEnt struct {
	mem      []byte // header page, then payload
	hdr      []byte
	payload  []byte
	commitID uint64
	side     []byte   // a copy of the request's payload (serve)
	in, out  [][]byte // reused iovecs for HandleRequest
}

// startURing sets up the rings of the connection on fd, whose INIT go-fuse
// answered with FUSE_OVER_IO_URING (kernel: what the kernel sent in INIT),
// and serves them. It returns once every queue has its entries registered
// (the kernel then sends requests over the rings) or, with an error
// wrapping errURingRefused, once none is left.
func startURing(fd int, fs fuse.RawFileSystem, mo *fuse.MountOptions, kernel *fuse.InitIn, log hclog.Logger) (*uringServer, error) {
	queues, err := possibleCPUs()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errURingRefused, err)
	}
	ps := fuse.NewProtocolServer(fs, mo)
	if err := initProtocol(ps, kernel); err != nil {
		return nil, fmt.Errorf("%w: %v", errURingRefused, err)
	}
	page := os.Getpagesize()
	maxWrite := max(mo.MaxWrite, 4096)
	s := &uringServer{
		fd:  fd,
		ps:  ps,
		log: log,
		// The kernel's least: max(8 KiB, max_write, max_pages pages).
		payload: max(8192, (maxWrite+page-1)/page*page),
	}
	n := queues * uringWorkers
	ready := make(chan error, n)
	// start is closed once every worker is set up; serve, written
	// before it is closed, tells them to serve or, if a worker failed,
	// to close their rings.
	start := make(chan struct{})
	var serve bool
	for i := range n {
		uq := &uringQueue{s: s, qid: uint16(i % queues)}
		s.workers = append(s.workers, uq)
		s.wg.Add(1)
		go uq.run(ready, start, &serve)
	}
	var first error
	for range n {
		if err := <-ready; err != nil && first == nil {
			first = err
		}
	}
	serve = first == nil
	close(start) // after the write of serve: the workers read it after
	if first != nil {
		s.wg.Wait()
		return nil, fmt.Errorf("%w: %v", errURingRefused, first)
	}
	s.wg.Add(1)
	go s.readDevice()
	return s, nil
}

// wait returns once the connection ended and nothing of s runs.
func (s *uringServer) wait() { s.wg.Wait() }

// initProtocol gives ps the INIT go-fuse's Server answered, so that it
// parses requests by the same negotiated flags.
func initProtocol(ps *fuse.ProtocolServer, kernel *fuse.InitIn) error {
	// go-fuse's request structs begin with the header.
	in := *kernel
	in.InHeader = fuse.InHeader{Length: uint32(unsafe.Sizeof(in)), Opcode: opInit, Unique: 1}
	req := unsafe.Slice((*byte)(unsafe.Pointer(&in)), unsafe.Sizeof(in))
	out := make([]byte, outHeaderSize+int(unsafe.Sizeof(fuse.InitOut{})))
	n, st := ps.HandleRequest([][]byte{req}, [][]byte{out})
	if !st.Ok() || n < outHeaderSize {
		return fmt.Errorf("replay INIT: %v", st)
	}
	if oh := (*fuse.OutHeader)(unsafe.Pointer(&out[0])); oh.Status != 0 {
		return fmt.Errorf("replay INIT: status %d", oh.Status)
	}
	io := (*fuse.InitOut)(unsafe.Pointer(&out[outHeaderSize]))
	if io.Flags64()&fuse.CAP_OVER_IO_URING == 0 {
		return errors.New("INIT did not negotiate FUSE_OVER_IO_URING")
	}
	return nil
}

// possibleCPUs returns how many queues the kernel makes: one per possible
// CPU (/sys/devices/system/cpu/possible, "0-3" or "0,2-5").
func possibleCPUs() (int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/possible")
	if err != nil {
		return 0, fmt.Errorf("read the possible CPUs: %w", err)
	}
	last := -1
	for _, part := range strings.Split(strings.TrimSpace(string(b)), ",") {
		hi := part
		if i := strings.IndexByte(part, '-'); i >= 0 {
			hi = part[i+1:]
		}
		n, err := strconv.Atoi(hi)
		if err != nil {
			return 0, fmt.Errorf("parse the possible CPUs %q: %w", b, err)
		}
		last = max(last, n)
	}
	if last < 0 || last > 4095 {
		return 0, fmt.Errorf("parse the possible CPUs %q", b)
	}
	return last + 1, nil
}

// run is the queue's thread: it sets the ring up, says so on ready,
// and, once start is closed, serves until the connection ends if serve
// says so. Closing the ring at the end makes the kernel cancel the
// entry's command.
func (q *uringQueue) run(ready chan<- error, start <-chan struct{}, serve *bool) {
	defer q.s.wg.Done()
	// Never unlocked: the thread ends with this goroutine, and the
	// kernel cancels the commands it submitted.
	runtime.LockOSThread()
	err := q.setup()
	ready <- err
	<-start
	if err == nil && *serve {
		q.serve()
	}
	q.teardown()
}

func (q *uringQueue) setup() error {
	ring, err := uring.New(uringSQEntries)
	if err != nil {
		return err
	}
	q.ring = ring
	if err := q.register(); err != nil {
		return err
	}
	if err := q.ring.Enter(false); err != nil {
		return err
	}
	// A refused REGISTER completes at once; a taken one completes when
	// a request is in its entry. Requests may come already (the other
	// queues were ready first): those are served by serve.
	q.ring.Completions(q.complete)
	return q.failed
}

// register makes the worker's entry: its buffers, and a REGISTER command
// that hands them to the kernel.
func (q *uringQueue) register() error {
	page := os.Getpagesize()
	mem, err := unix.Mmap(-1, 0, page+q.s.payload, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return fmt.Errorf("map a ring entry: %w", err)
	}
	e := &uringEnt{mem: mem, hdr: mem[:uringHeaderSize], payload: mem[page:]}
	// The two iovecs REGISTER takes sit in the header page, after the
	// header.
	iov := unsafe.Slice((*unix.Iovec)(unsafe.Pointer(&mem[512])), 2)
	iov[0].Base, iov[0].Len = &mem[0], uringHeaderSize
	iov[1].Base, iov[1].Len = &mem[page], uint64(q.s.payload)
	sqe, err := q.next()
	if err != nil {
		unix.Munmap(mem)
		return err
	}
	q.ent, q.live = e, true
	q.fuseCmd(sqe, uringCmdRegister, e, 0)
	sqe.Addr = uint64(uintptr(unsafe.Pointer(&iov[0])))
	sqe.Len = 2
	return nil
}

// fuseCmd fills sqe with a FUSE command for entry e.
func (q *uringQueue) fuseCmd(sqe *uring.SQE, op uint32, e *uringEnt, commitID uint64) {
	sqe.Opcode = uring.OpURingCmd
	sqe.Fd = int32(q.s.fd)
	sqe.Off = uint64(op) // cmd_op
	// struct fuse_uring_cmd_req: flags, commit_id, qid.
	binary.LittleEndian.PutUint64(sqe.Cmd[8:], commitID)
	binary.LittleEndian.PutUint16(sqe.Cmd[16:], q.qid)
}

// next returns a free submission entry, submitting what is filled if none
// is left.
func (q *uringQueue) next() (*uring.SQE, error) {
	sqe, err := q.ring.Next()
	if errors.Is(err, uring.ErrFull) {
		if err := q.ring.Enter(false); err != nil {
			return nil, err
		}
		sqe, err = q.ring.Next()
	}
	return sqe, err
}

// serve answers requests until the kernel lets the entry go (the
// connection ended).
func (q *uringQueue) serve() {
	for q.live {
		if err := q.ring.Enter(true); err != nil {
			q.s.log.Error("FUSE ring failed", "queue", q.qid, "error", err)
			return
		}
		q.ring.Completions(q.complete)
	}
}

// complete handles one completion: a request in the entry, or the
// kernel letting the entry go.
func (q *uringQueue) complete(c uring.CQE) {
	if c.Res < 0 {
		// The connection ended (ENOTCONN, ECANCELED), or the kernel
		// refused the command.
		q.live = false
		if err := unix.Errno(-c.Res); err != unix.ENOTCONN && err != unix.ECANCELED && q.failed == nil {
			q.failed = fmt.Errorf("FUSE ring command: %w", err)
		}
		return
	}
	q.s.ringRequests.Add(1)
	switch (*fuse.InHeader)(unsafe.Pointer(&q.ent.hdr[0])).Opcode {
	case opGetlk, opSetlk, opSetlkw:
		q.s.lockRequests.Add(1)
	}
	q.s.serve(q.ent)
	q.commit(q.ent)
}

// commit hands e's answer to the kernel and e back for the next request.
func (q *uringQueue) commit(e *uringEnt) {
	sqe, err := q.next()
	if err != nil {
		q.s.log.Error("FUSE ring: commit", "queue", q.qid, "error", err)
		return
	}
	q.fuseCmd(sqe, uringCmdCommitAndFetch, e, e.commitID)
}

// teardown closes the ring (the kernel cancels its command) and frees
// the entry's buffers.
func (q *uringQueue) teardown() {
	if q.ring != nil {
		q.ring.Close()
	}
	if q.ent != nil {
		unix.Munmap(q.ent.mem)
	}
}

// serve answers the request in e, in place: go-fuse's ProtocolServer
// reads the request from the entry's buffers and writes its answer there.
func (s *uringServer) serve(e *uringEnt) {
	h := (*fuse.InHeader)(unsafe.Pointer(&e.hdr[0]))
	unique := h.Unique
	e.commitID = binary.LittleEndian.Uint64(e.hdr[uringEntOff+8:])
	payloadSz := int(binary.LittleEndian.Uint32(e.hdr[uringEntOff+16:]))
	opSize := int(h.Length) - inHeaderSize - payloadSz
	if opSize < 0 || opSize > uringEntOff-uringOpInOff || payloadSz > len(e.payload) {
		s.log.Error("FUSE ring: malformed request", "opcode", h.Opcode, "len", h.Length, "payload", payloadSz)
		s.answerError(e, unique, unix.EIO)
		return
	}
	payload := e.payload[:payloadSz]
	if payloadSz > 0 && h.Opcode != opWrite {
		// The answer is written into the same buffer, and go-fuse may
		// write it while it still reads the request's (a name, an
		// xattr's). A WRITE's data is read before its answer is made.
		e.side = append(e.side[:0], payload...)
		payload = e.side
	}
	e.in = append(e.in[:0], e.hdr[:inHeaderSize], e.hdr[uringOpInOff:uringOpInOff+opSize], payload)
	e.out = append(e.out[:0], e.hdr[:outHeaderSize], e.payload)
	n, st := s.ps.HandleRequest(e.in, e.out)
	if !st.Ok() || n < outHeaderSize {
		if st.Ok() {
			st = fuse.ENOSYS // answered nothing, yet the kernel waits for an answer
		}
		s.answerError(e, unique, unix.Errno(st))
		return
	}
	binary.LittleEndian.PutUint32(e.hdr[uringEntOff+16:], uint32(n-outHeaderSize))
}

func (s *uringServer) answerError(e *uringEnt, unique uint64, errno unix.Errno) {
	oh := (*fuse.OutHeader)(unsafe.Pointer(&e.hdr[0]))
	*oh = fuse.OutHeader{Length: uint32(outHeaderSize), Status: -int32(errno), Unique: unique}
	binary.LittleEndian.PutUint32(e.hdr[uringEntOff+16:], 0)
}

// readDevice serves what still comes through /dev/fuse: FORGET,
// BATCH_FORGET and INTERRUPT (which finds requests of the rings, being
// the same ProtocolServer's). It ends when the connection does.
func (s *uringServer) readDevice() {
	defer s.wg.Done()
	// The kernel refuses a read into less than this.
	buf := make([]byte, max(8192, s.payload+4096))
	out := make([]byte, 4096)
	for {
		n, err := unix.Read(s.fd, buf)
		switch err {
		case nil:
		case unix.EINTR, unix.EAGAIN, unix.ENOENT:
			continue
		default:
			if err != unix.ENODEV {
				s.log.Error("FUSE: read /dev/fuse", "error", err)
			}
			return
		}
		if n < inHeaderSize {
			continue
		}
		h := (*fuse.InHeader)(unsafe.Pointer(&buf[0]))
		unique, opcode := h.Unique, h.Opcode
		m, st := s.ps.HandleRequest([][]byte{buf[:n]}, [][]byte{out})
		if !st.Ok() || (m == 0 && opcode != opInterrupt && unique != 0 && !noAnswer(opcode)) {
			if st.Ok() {
				st = fuse.ENOSYS
			}
			oh := fuse.OutHeader{Length: uint32(outHeaderSize), Status: -int32(st), Unique: unique}
			m = copy(out, unsafe.Slice((*byte)(unsafe.Pointer(&oh)), outHeaderSize))
		}
		if m > 0 {
			// ENOENT: the request was answered or interrupted since.
			unix.Write(s.fd, out[:m])
		}
	}
}

// noAnswer tells the operations the kernel expects no answer to.
func noAnswer(opcode uint32) bool {
	const opForget, opBatchForget, opNotifyReply = 2, 42, 41
	return opcode == opForget || opcode == opBatchForget || opcode == opNotifyReply
}
