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
// would. A request that may wait without bound (a lock that waits,
// SETLKW) is served on a goroutine instead, and its worker takes a new
// entry (up to uringMaxEntries) to go on with; the answer comes back to
// the worker's thread through an eventfd the thread keeps a read queued
// on. (Mounts on the rings leave locks to the kernel, so no SETLKW comes
// today: see serveNodes. This stays as the guard for one that would.)
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

	opInit      = 26
	opSetlkw    = 33
	opInterrupt = 36
	opWrite     = 16
)

// Workers per kernel queue, and entries per worker: made at the start,
// and at most (serveAsync adds them).
const (
	uringWorkers        = 4
	uringInitialEntries = 1
	uringMaxEntries     = 32
	uringSQEntries      = 128 // > uringMaxEntries + 1: one command per entry and the eventfd read
	eventfdTag          = ^uint64(0)
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
	// stopping ends the workers while the connection lives (a failed
	// start); they end by themselves when it ends.
	stopping atomic.Bool
	wg       sync.WaitGroup // the queues' threads and the /dev/fuse reader

	asyncMu sync.Mutex
	async   map[uint64]bool // uniques of requests served on goroutines

	// ringRequests counts the requests that came over the rings.
	ringRequests atomic.Uint64
}

// uringQueue is one worker of a kernel queue: its thread, ring and
// entries.
type uringQueue struct {
	s    *uringServer
	qid  uint16
	ring *uring.Ring
	efd  int
	// efdBuf is where the queued eventfd read lands (off the Go heap:
	// the kernel writes it whenever the read completes).
	efdBuf []byte
	ents   []*uringEnt
	live   int // entries whose command the kernel holds or will get back
	held   int // entries held by requests served on goroutines
	failed error

	mu      sync.Mutex
	replies []*uringEnt // answered on goroutines, to be committed
}

// uringEnt is one ring entry: header and payload buffers, mapped off the
// Go heap since the kernel writes them at any time.
type uringEnt struct {
	idx      int
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
		async:   make(map[uint64]bool),
	}
	n := queues * uringWorkers
	ready := make(chan error, n)
	for i := range n {
		uq := &uringQueue{s: s, qid: uint16(i % queues), efd: -1}
		s.workers = append(s.workers, uq)
		s.wg.Add(1)
		go uq.run(ready)
	}
	var first error
	for range n {
		if err := <-ready; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		s.stop()
		s.wg.Wait()
		return nil, fmt.Errorf("%w: %v", errURingRefused, first)
	}
	s.wg.Add(1)
	go s.readDevice()
	return s, nil
}

// heldRequests returns how many requests are being served on goroutines.
func (s *uringServer) heldRequests() int {
	s.asyncMu.Lock()
	defer s.asyncMu.Unlock()
	return len(s.async)
}

// wait returns once the connection ended and nothing of s runs.
func (s *uringServer) wait() { s.wg.Wait() }

// stop ends the queues while the connection lives: each closes its ring,
// and the kernel cancels the commands on it.
func (s *uringServer) stop() {
	s.stopping.Store(true)
	for _, q := range s.workers {
		q.wake()
	}
}

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

// run is the queue's thread: it sets the ring up, says so on ready, and
// serves until the connection ends.
func (q *uringQueue) run(ready chan<- error) {
	defer q.s.wg.Done()
	// Never unlocked: the thread ends with this goroutine, and the
	// kernel cancels the commands it submitted.
	runtime.LockOSThread()
	err := q.setup()
	ready <- err
	if err == nil {
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
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("eventfd: %w", err)
	}
	q.efd = efd
	q.efdBuf, err = unix.Mmap(-1, 0, os.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return fmt.Errorf("map the eventfd buffer: %w", err)
	}
	if err := q.armEventfd(); err != nil {
		return err
	}
	for range uringInitialEntries {
		if err := q.register(); err != nil {
			return err
		}
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

// register adds an entry: its buffers, and a REGISTER command that hands
// them to the kernel.
func (q *uringQueue) register() error {
	page := os.Getpagesize()
	mem, err := unix.Mmap(-1, 0, page+q.s.payload, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return fmt.Errorf("map a ring entry: %w", err)
	}
	e := &uringEnt{idx: len(q.ents), mem: mem, hdr: mem[:uringHeaderSize], payload: mem[page:]}
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
	q.ents = append(q.ents, e)
	q.live++
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
	sqe.UserData = uint64(e.idx)
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

// armEventfd queues a read of the eventfd: it completes when a goroutine
// has answered a request (wake).
func (q *uringQueue) armEventfd() error {
	sqe, err := q.next()
	if err != nil {
		return err
	}
	sqe.Opcode = uring.OpRead
	sqe.Fd = int32(q.efd)
	sqe.Addr = uint64(uintptr(unsafe.Pointer(&q.efdBuf[0])))
	sqe.Len = 8
	sqe.UserData = eventfdTag
	return nil
}

// wake makes the queue's thread look at its replies (and at stopping).
func (q *uringQueue) wake() {
	var one [8]byte
	binary.LittleEndian.PutUint64(one[:], 1)
	if q.efd >= 0 {
		unix.Write(q.efd, one[:])
	}
}

// serve answers requests until every entry is gone (the connection
// ended) or the server stops.
func (q *uringQueue) serve() {
	for q.live > 0 && !q.s.stopping.Load() {
		if err := q.ring.Enter(true); err != nil {
			q.s.log.Error("FUSE ring failed", "queue", q.qid, "error", err)
			return
		}
		q.ring.Completions(q.complete)
	}
}

// complete handles one completion: a request in an entry, an entry the
// kernel let go, or the eventfd.
func (q *uringQueue) complete(c uring.CQE) {
	if c.UserData == eventfdTag {
		q.mu.Lock()
		replies := q.replies
		q.replies = nil
		q.mu.Unlock()
		for _, e := range replies {
			q.held--
			q.commit(e)
		}
		if c.Res < 0 && c.Res != -int32(unix.EINTR) && c.Res != -int32(unix.EAGAIN) {
			if c.Res != -int32(unix.ECANCELED) {
				q.s.log.Error("FUSE ring: eventfd read failed", "queue", q.qid, "error", unix.Errno(-c.Res))
			}
			return
		}
		if err := q.armEventfd(); err != nil {
			q.s.log.Error("FUSE ring: queue the eventfd read", "queue", q.qid, "error", err)
		}
		return
	}
	if c.UserData >= uint64(len(q.ents)) {
		return
	}
	e := q.ents[c.UserData]
	if c.Res < 0 {
		// The kernel let the entry go: the connection ended (ENOTCONN,
		// ECANCELED), or it refused the command.
		q.live--
		if err := unix.Errno(-c.Res); err != unix.ENOTCONN && err != unix.ECANCELED && q.failed == nil {
			q.failed = fmt.Errorf("FUSE ring command: %w", err)
		}
		return
	}
	q.s.ringRequests.Add(1)
	if (*fuse.InHeader)(unsafe.Pointer(&e.hdr[0])).Opcode == opSetlkw {
		q.serveAsync(e)
		return
	}
	q.s.serve(e)
	q.commit(e)
}

// serveAsync serves e on a goroutine, and first makes sure entries are
// left for the queue's other requests.
func (q *uringQueue) serveAsync(e *uringEnt) {
	q.held++
	if len(q.ents)-q.held < 1 && len(q.ents) < uringMaxEntries {
		if err := q.register(); err != nil {
			q.s.log.Warn("FUSE ring: add an entry", "queue", q.qid, "error", err)
		}
	}
	unique := (*fuse.InHeader)(unsafe.Pointer(&e.hdr[0])).Unique
	q.s.asyncMu.Lock()
	q.s.async[unique] = true
	q.s.asyncMu.Unlock()
	go func() {
		q.s.serve(e)
		q.s.asyncMu.Lock()
		delete(q.s.async, unique)
		q.s.asyncMu.Unlock()
		q.mu.Lock()
		q.replies = append(q.replies, e)
		q.mu.Unlock()
		q.wake()
	}()
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

// teardown closes the ring (the kernel cancels its commands, the queued
// eventfd read too) and frees the buffers, once the requests served on
// goroutines, which write into theirs, are answered.
func (q *uringQueue) teardown() {
	if q.ring != nil {
		q.ring.Close()
	}
	for q.held > 0 {
		var b [8]byte
		unix.Read(q.efd, b[:])
		q.mu.Lock()
		q.held -= len(q.replies)
		q.replies = nil
		q.mu.Unlock()
	}
	if q.efd >= 0 {
		unix.Close(q.efd)
	}
	for _, e := range q.ents {
		unix.Munmap(e.mem)
	}
	if q.efdBuf != nil {
		unix.Munmap(q.efdBuf)
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
// the same ProtocolServer's). It ends when the connection does, and then
// interrupts the requests still served on goroutines, as go-fuse's Serve
// does with its own.
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
			s.interruptAsync()
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

// interruptAsync interrupts the requests served on goroutines, once the
// connection is gone, by an INTERRUPT of each to the ProtocolServer.
func (s *uringServer) interruptAsync() {
	s.asyncMu.Lock()
	uniques := make([]uint64, 0, len(s.async))
	for u := range s.async {
		uniques = append(uniques, u)
	}
	s.asyncMu.Unlock()
	for _, u := range uniques {
		in := fuse.InterruptIn{Unique: u}
		in.InHeader = fuse.InHeader{Length: uint32(unsafe.Sizeof(in)), Opcode: opInterrupt, Unique: 1}
		s.ps.HandleRequest([][]byte{unsafe.Slice((*byte)(unsafe.Pointer(&in)), unsafe.Sizeof(in))}, [][]byte{make([]byte, 64)})
	}
}
