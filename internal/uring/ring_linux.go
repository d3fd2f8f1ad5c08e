// Package uring is the part of io_uring that warren's FUSE transport
// (fs/uring_linux.go) needs, on golang.org/x/sys/unix: a ring with 128-byte
// submission entries, owned by the one thread that made it, with
// IORING_OP_URING_CMD and IORING_OP_READ submissions and a loop over
// completions. It is written here rather than taken from a Go io_uring
// library because the few that exist model 64-byte entries only, and the
// FUSE commands live in the second half of a 128-byte one.
//
// A Ring is not safe for concurrent use: it is made with
// IORING_SETUP_SINGLE_ISSUER, so only the thread that made it may submit
// (the caller locks its goroutine to that thread), and the kernel runs the
// completions' task work only when that thread waits in Enter
// (IORING_SETUP_DEFER_TASKRUN).
package uring

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Setup flags, opcodes and enter flags of the kernel's io_uring ABI
// (include/uapi/linux/io_uring.h).
const (
	setupCQSize       = 1 << 3
	setupSubmitAll    = 1 << 7
	setupSQE128       = 1 << 10
	setupSingleIssuer = 1 << 12
	setupDeferTaskrun = 1 << 13

	featSingleMmap = 1 << 0

	enterGetEvents = 1 << 0

	offSQRing = 0
	offCQRing = 0x8000000
	offSQEs   = 0x10000000

	// OpRead reads into a buffer (here: an eventfd's counter).
	OpRead = 22
	// OpURingCmd passes a command to the file's driver (here: /dev/fuse).
	OpURingCmd = 46

	// SQESize is the size of one submission entry on a Ring.
	SQESize = 128
)

// params is struct io_uring_params.
type params struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFd uint32
	resv                                                                   [3]uint32
	sqOff                                                                  sqringOffsets
	cqOff                                                                  cqringOffsets
}

type sqringOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

type cqringOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

// SQE is one 128-byte submission entry. The fields are those of struct
// io_uring_sqe that this package's callers set; Cmd is the 80 bytes a
// URING_CMD passes to the driver.
type SQE struct {
	Opcode      uint8
	Flags       uint8
	Ioprio      uint16
	Fd          int32
	Off         uint64 // for URING_CMD: cmd_op in the low 32 bits
	Addr        uint64
	Len         uint32
	OpFlags     uint32
	UserData    uint64
	BufIndex    uint16
	Personality uint16
	SpliceFdIn  int32
	Cmd         [80]byte
}

// CQE is one completion.
type CQE struct {
	UserData uint64
	Res      int32
	Flags    uint32
}

// Ring is one io_uring instance with 128-byte submission entries.
type Ring struct {
	fd              int
	ringMem, sqeMem []byte
	sqHead, sqTail  *uint32
	sqMask          uint32
	sqArray         []uint32
	sqes            []SQE
	cqHead, cqTail  *uint32
	cqMask          uint32
	cqes            []CQE
	pending         uint32 // entries filled since the last Enter
	sqEntries       uint32
	localTail       uint32 // tail as filled, published at Enter
	deferTaskrun    bool
	closed          bool
}

// ErrFull is returned by Next when every submission entry is taken.
var ErrFull = errors.New("uring: submission queue full")

// New makes a ring of at least entries submission entries (a power of
// two up to 4096) and twice as many completion entries, to be used by the
// calling thread only. It asks for SINGLE_ISSUER and DEFER_TASKRUN, and
// goes without them where the kernel refuses them.
func New(entries uint32) (*Ring, error) {
	flags := uint32(setupSQE128 | setupCQSize | setupSubmitAll | setupSingleIssuer | setupDeferTaskrun)
	r, err := newRing(entries, flags)
	if errors.Is(err, unix.EINVAL) {
		r, err = newRing(entries, setupSQE128|setupCQSize|setupSubmitAll)
	}
	return r, err
}

func newRing(entries, flags uint32) (*Ring, error) {
	p := params{flags: flags, cqEntries: 2 * entries}
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		return nil, fmt.Errorf("uring: io_uring_setup: %w", errno)
	}
	r := &Ring{fd: int(fd), sqEntries: p.sqEntries, deferTaskrun: flags&setupDeferTaskrun != 0}
	if p.features&featSingleMmap == 0 {
		unix.Close(r.fd)
		return nil, fmt.Errorf("uring: the kernel lacks IORING_FEAT_SINGLE_MMAP")
	}
	sqSize := p.sqOff.array + p.sqEntries*4
	cqSize := p.cqOff.cqes + p.cqEntries*uint32(unsafe.Sizeof(CQE{}))
	size := max(sqSize, cqSize)
	mem, err := unix.Mmap(r.fd, offSQRing, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		unix.Close(r.fd)
		return nil, fmt.Errorf("uring: map the rings: %w", err)
	}
	sqeMem, err := unix.Mmap(r.fd, offSQEs, int(p.sqEntries)*SQESize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		unix.Munmap(mem)
		unix.Close(r.fd)
		return nil, fmt.Errorf("uring: map the submission entries: %w", err)
	}
	r.ringMem, r.sqeMem = mem, sqeMem
	base := unsafe.Pointer(&mem[0])
	r.sqHead = (*uint32)(unsafe.Add(base, p.sqOff.head))
	r.sqTail = (*uint32)(unsafe.Add(base, p.sqOff.tail))
	r.sqMask = *(*uint32)(unsafe.Add(base, p.sqOff.ringMask))
	r.sqArray = unsafe.Slice((*uint32)(unsafe.Add(base, p.sqOff.array)), p.sqEntries)
	r.cqHead = (*uint32)(unsafe.Add(base, p.cqOff.head))
	r.cqTail = (*uint32)(unsafe.Add(base, p.cqOff.tail))
	r.cqMask = *(*uint32)(unsafe.Add(base, p.cqOff.ringMask))
	r.cqes = unsafe.Slice((*CQE)(unsafe.Add(base, p.cqOff.cqes)), p.cqEntries)
	r.sqes = unsafe.Slice((*SQE)(unsafe.Pointer(&sqeMem[0])), p.sqEntries)
	// Entry i of the array always names submission entry i: entries are
	// filled in ring order.
	for i := range r.sqArray {
		r.sqArray[i] = uint32(i)
	}
	r.localTail = atomic.LoadUint32(r.sqTail)
	return r, nil
}

// Fd is the ring's descriptor.
func (r *Ring) Fd() int { return r.fd }

// Next returns the next free submission entry, zeroed, to be filled and
// sent by the next Enter.
func (r *Ring) Next() (*SQE, error) {
	head := atomic.LoadUint32(r.sqHead)
	if r.localTail-head >= r.sqEntries {
		return nil, ErrFull
	}
	sqe := &r.sqes[r.localTail&r.sqMask]
	*sqe = SQE{}
	r.localTail++
	r.pending++
	return sqe, nil
}

// Enter submits the entries filled since the last call and, if wait,
// waits until at least one completion is there. An interrupted wait
// (EINTR) is not an error: the caller looks at the completions and calls
// again.
func (r *Ring) Enter(wait bool) error {
	atomic.StoreUint32(r.sqTail, r.localTail)
	var flags, minComplete uintptr
	if wait {
		flags, minComplete = enterGetEvents, 1
	} else if r.deferTaskrun {
		// Run the task work a submission left (the completions of
		// commands that failed at once are then visible).
		flags = enterGetEvents
	}
	for {
		n, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(r.pending), minComplete, flags, 0, 0)
		switch errno {
		case 0:
			// With SUBMIT_ALL the kernel takes every entry, even
			// past one that fails (its completion says so).
			r.pending -= min(uint32(n), r.pending)
			return nil
		case unix.EINTR:
			return nil
		case unix.EAGAIN, unix.EBUSY:
			// Completions must be reaped before more can be submitted.
			if r.Ready() > 0 {
				return nil
			}
			continue
		default:
			return fmt.Errorf("uring: io_uring_enter: %w", errno)
		}
	}
}

// Ready returns how many completions wait to be read.
func (r *Ring) Ready() uint32 {
	return atomic.LoadUint32(r.cqTail) - atomic.LoadUint32(r.cqHead)
}

// Completions calls fn for each completion there, in order, and marks
// them read.
func (r *Ring) Completions(fn func(CQE)) {
	head := atomic.LoadUint32(r.cqHead)
	tail := atomic.LoadUint32(r.cqTail)
	for ; head != tail; head++ {
		c := r.cqes[head&r.cqMask]
		// Marked read before fn runs: fn may submit, and the kernel
		// may then post into the slot.
		atomic.StoreUint32(r.cqHead, head+1)
		fn(c)
	}
}

// Close unmaps and closes the ring; the kernel cancels what is still
// submitted on it.
func (r *Ring) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	unix.Munmap(r.sqeMem)
	unix.Munmap(r.ringMem)
	return unix.Close(r.fd)
}

// Probe tells whether the kernel gives this process rings with 128-byte
// entries (io_uring may be turned off by kernel.io_uring_disabled or a
// seccomp filter).
func Probe() error {
	r, err := New(2)
	if err != nil {
		return err
	}
	return r.Close()
}
