package reclayer

// #include <stdint.h>
import "C"

import (
	"encoding/binary"
	"fmt"
	"math"
	"syscall"
	"time"
	"unsafe"

	"secinfer/native/internal/status"
)

// recvCall is what one rl_recv call was given and returns.
type recvCall struct {
	dst      []byte  // where a small frame (or a bye's reason) is written
	others   []int32 // other descriptors that end a wait when readable
	deadline time.Time
	wait     bool
	waited   time.Duration // spent in short polls (rawWait) during this call
	spun     bool          // the busy-poll budget was used during this call
	val      int64         // info[0]
	inFrame  int64         // info[1]
	stamp    float64
	msg      string
}

// rl_recv reads and opens records of an incoming stream until one event (see the ev*
// constants), waiting at most waitUs microseconds for bytes (0: never blocks). dst/dcap:
// where a frame of at most dcap bytes is written; after evNeed, the buffer asked for. While
// waiting, a readable descriptor of others[:nothers] ends the wait with evOther. info[0],
// info[1]: the event's values; info[2]: bytes read from the socket during the call; info[3]:
// bytes read but not yet parsed (more records may be complete: call again before waiting
// for the descriptor to become readable); *stamp:
// the sender's stamp of the event's (last) record. Messages of failures go to errbuf.
//
//export rl_recv
func rl_recv(h C.uint64_t, waitUs C.int64_t, dst unsafe.Pointer, dcap C.int64_t, others *C.int32_t, nothers C.int,
	info *C.int64_t, stamp *C.double, errbuf *C.char, errlen C.int) C.int {
	s := lookup(h)
	if s == nil {
		return evBadHandle
	}
	call := recvCall{dst: bytesAt(dst, int64(dcap)), wait: waitUs > 0}
	if nothers > 0 {
		call.others = unsafe.Slice((*int32)(unsafe.Pointer(others)), int(nothers))
	}
	if call.wait {
		call.deadline = time.Now().Add(time.Duration(waitUs) * time.Microsecond)
	}
	return C.int(s.run(&call, unsafe.Pointer(info), unsafe.Pointer(stamp), unsafe.Pointer(errbuf), int(errlen)))
}

// run makes one receive call and writes its results where the caller asked.
func (s *stream) run(call *recvCall, info, stamp, errbuf unsafe.Pointer, errlen int) int {
	s.got = 0
	ev := s.recv(call)
	out := unsafe.Slice((*int64)(info), 4)
	out[0], out[1], out[2], out[3] = call.val, call.inFrame, s.got, int64(s.fill-s.pos)
	*(*float64)(stamp) = call.stamp
	if call.msg != "" {
		status.WriteErr(errbuf, errlen, call.msg)
	}
	return ev
}

// rl_bind gives an incoming stream, once, the memory its rl_next calls report into (kept
// by the caller until rl_free): scratch (where a frame of at most scap bytes is written
// when the call names no buffer), info (4 x int64), stamp (a double) and errbuf (errlen
// bytes), as rl_recv's arguments of the same names. Returns 0, or -1 for an unknown handle.
//
//export rl_bind
func rl_bind(h C.uint64_t, scratch unsafe.Pointer, scap C.int64_t, info *C.int64_t, stamp *C.double,
	errbuf *C.char, errlen C.int) C.int {
	s := lookup(h)
	if s == nil {
		return -1
	}
	s.bound = boundMem{scratch: scratch, scap: int64(scap), info: unsafe.Pointer(info),
		stamp: unsafe.Pointer(stamp), errbuf: unsafe.Pointer(errbuf), errlen: int(errlen), others: s.bound.others}
	return 0
}

// rl_next is rl_recv with the memory given to rl_bind and no other descriptors (the
// protocol thread waiting for one peer): four arguments instead of ten, for the hot path.
// dst = NULL: the bound scratch buffer. Returns evBadHandle if the stream was never bound.
//
//export rl_next
func rl_next(h C.uint64_t, waitUs C.int64_t, dst unsafe.Pointer, dcap C.int64_t) C.int {
	s := lookup(h)
	if s == nil || s.bound.info == nil {
		return evBadHandle
	}
	b := &s.bound
	if dst == nil {
		dst, dcap = b.scratch, C.int64_t(b.scap)
	}
	call := recvCall{dst: bytesAt(dst, int64(dcap)), wait: waitUs > 0}
	if call.wait {
		call.deadline = time.Now().Add(time.Duration(waitUs) * time.Microsecond)
	}
	return C.int(s.run(&call, b.info, b.stamp, b.errbuf, b.errlen))
}

func (s *stream) fail(c *recvCall, format string, a ...any) int {
	c.msg = fmt.Sprintf(format, a...)
	return evFrameErr
}

func (s *stream) recv(c *recvCall) int {
	if s.rx == nil {
		s.rx = make([]byte, rxBuffer)
	}
	if s.want > 0 { // a buffer was asked for: adopt it
		if int64(len(c.dst)) < s.want {
			c.val = s.want
			return evNeed
		}
		s.frame = c.dst[:s.want]
		s.want = 0
		if s.parts != nil && !s.sized { // a frame of records without a size record, complete
			n := copy(s.frame, s.parts)
			s.parts, s.size = nil, 0
			s.frame = nil
			c.val, c.inFrame = int64(n), 1
			return evFrame
		}
	}
	for {
		if s.big != nil { // a large record being read where it belongs
			for s.bigGot < len(s.big) {
				n, ev := s.read(c, s.big[s.bigGot:])
				if ev != evFrame {
					return ev // (kept: the next call reads on)
				}
				s.bigGot += n
			}
			body := s.big
			s.big = nil
			if ev, _ := s.record(c, s.bigHdr[:], body, true); ev != evNone {
				return ev
			}
			continue
		}
		if s.fill-s.pos < hdrSize {
			if ev := s.fillRx(c); ev != evFrame {
				return ev
			}
			continue
		}
		hdr := s.rx[s.pos : s.pos+hdrSize]
		length := int(binary.LittleEndian.Uint32(hdr))
		kind := hdr[12]
		if length < tagSize || length > maxRecord+tagSize {
			return s.fail(c, "malformed record (length %d)", length)
		}
		if s.fill-s.pos-hdrSize >= length { // the whole record is here
			body := s.rx[s.pos+hdrSize : s.pos+hdrSize+length]
			ev, consumed := s.record(c, hdr, body, false)
			if consumed {
				s.pos += hdrSize + length
			}
			if ev != evNone {
				return ev
			}
			continue
		}
		if hdrSize+length <= len(s.rx) { // fits the buffer: read on
			if ev := s.fillRx(c); ev != evFrame {
				return ev
			}
			continue
		}
		// a record larger than the buffer: its body is read straight where it belongs
		var target []byte
		if kind&^more == kData && s.frame != nil && s.sized && s.size+int64(length) <= int64(len(s.frame)) {
			target = s.frame[s.size : s.size+int64(length)]
		} else if kind == kData && s.frame != nil && !s.sized && len(s.frame) == length {
			target = s.frame // the single large record a buffer was adopted for
		} else if kind == kData && s.frame == nil && s.size == 0 && s.parts == nil && !s.oversized &&
			int64(length-tagSize) <= s.maxFrame {
			s.want = int64(length) // a frame in one large record: into a buffer of its own
			c.val = s.want
			return evNeed
		} else {
			target = s.scratchOf(length)
		}
		s.bigHdr = [hdrSize]byte(hdr)
		s.bigGot = copy(target, s.rx[s.pos+hdrSize:s.fill]) // (every byte after the header is this record's)
		s.big = target
		s.pos, s.fill = 0, 0
	}
}

// fillRx reads more bytes into rx (moving the unparsed ones to its start first); evFrame
// means bytes arrived.
func (s *stream) fillRx(c *recvCall) int {
	if s.pos > 0 {
		s.fill = copy(s.rx, s.rx[s.pos:s.fill])
		s.pos = 0
	}
	n, ev := s.read(c, s.rx[s.fill:])
	s.fill += n
	return ev
}

// read reads once into p (at least one byte), waiting until the call's deadline; evFrame
// when bytes came (their count first), else the event that ends the call.
func (s *stream) read(c *recvCall, p []byte) (int, int) {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(s.fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		if e == 0 {
			if n == 0 {
				return 0, evEOF
			}
			s.got += int64(n)
			return int(n), evFrame
		}
		if e == syscall.EINTR {
			continue
		}
		if e != syscall.EAGAIN {
			c.msg = e.Error()
			return 0, evOSErr
		}
		if !c.wait {
			return 0, evNone
		}
		if s.spin > 0 && !c.spun {
			// busy-poll (rl_spin): read again without blocking for a short budget before
			// the poll puts this thread to sleep; a peer's answer that comes within it
			// costs no wake-up. After k budgets in a row ran out, the next 2^k - 1 waits
			// (at most 63) block at once: a peer that computes long is not spun for.
			c.spun = true
			if s.spinSkip > 0 {
				s.spinSkip--
			} else if n, ev, ok := s.spinRead(c, p); ok {
				s.spinRun = 0
				return n, ev
			} else {
				s.spinRun = min(s.spinRun+1, 6)
				s.spinSkip = 1<<s.spinRun - 1
			}
		}
		if ev := s.poll(c); ev != evFrame {
			return 0, ev
		}
	}
}

// spinRead reads p without blocking until bytes come or the stream's spin budget (or
// the call's deadline) passes; with spinYield, the thread yields its processor between
// reads (another runnable task there goes first). ok: the read ended the call's wait
// (bytes: evFrame with their count; or the event that ends the call).
func (s *stream) spinRead(c *recvCall, p []byte) (int, int, bool) {
	start := time.Now()
	end := start.Add(s.spin)
	if c.deadline.Before(end) {
		end = c.deadline
	}
	for {
		if s.spinYield {
			syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
		}
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(s.fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		if e == 0 {
			s.spinHits++
			if n == 0 {
				return 0, evEOF, true
			}
			s.got += int64(n)
			return int(n), evFrame, true
		}
		if e != syscall.EAGAIN && e != syscall.EINTR {
			c.msg = e.Error()
			return 0, evOSErr, true
		}
		if !time.Now().Before(end) {
			s.spinMisses++
			return 0, 0, false
		}
	}
}

// rl_spin sets the stream's busy-poll budget (microseconds; 0: none) and whether the
// thread yields its processor between the reads; returns the reads the budget ended so
// far (bytes came while spinning) in *hits and the budgets that passed without bytes in
// *misses (statistics for the caller), or -1 for an unknown handle.
//
//export rl_spin
func rl_spin(h C.uint64_t, us C.int64_t, yield C.int, hits *C.int64_t, misses *C.int64_t) C.int {
	s := lookup(h)
	if s == nil {
		return -1
	}
	if us >= 0 {
		s.spin = time.Duration(us) * time.Microsecond
		s.spinYield = yield != 0
	}
	*hits = C.int64_t(s.spinHits)
	*misses = C.int64_t(s.spinMisses)
	return 0
}

// rawWait bounds the polls made without the scheduler's knowledge, per call.
const rawWait = 2 * time.Millisecond

type pollFd struct {
	fd      int32
	events  int16
	revents int16
}

// poll waits until the stream is readable (evFrame), another descriptor is (evOther) or
// the deadline passes (evNone).
func (s *stream) poll(c *recvCall) int {
	fds := make([]pollFd, 1+len(c.others))
	fds[0] = pollFd{fd: int32(s.fd), events: 0x1}
	for i, o := range c.others {
		fds[i+1] = pollFd{fd: o, events: 0x1}
	}
	for {
		left := time.Until(c.deadline)
		if left <= 0 {
			return evNone
		}
		ms := int((left + time.Millisecond - 1) / time.Millisecond)
		var n uintptr
		var e syscall.Errno
		if c.waited < rawWait {
			// a short wait (a peer's answer usually comes within it) without telling the
			// scheduler: entering a blocking system call makes Go's monitor thread wake
			// every 20 us to take the processor back, which costs a 2-core host more than
			// the wait. A longer wait is a normal system call (the runtime, e.g. a garbage
			// collection, never waits for it).
			ms = min(ms, int(rawWait/time.Millisecond))
			c.waited += time.Duration(ms) * time.Millisecond
			n, _, e = syscall.RawSyscall(syscall.SYS_POLL, uintptr(unsafe.Pointer(&fds[0])), uintptr(len(fds)), uintptr(ms))
		} else {
			n, _, e = syscall.Syscall(syscall.SYS_POLL, uintptr(unsafe.Pointer(&fds[0])), uintptr(len(fds)), uintptr(ms))
		}
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			c.msg = e.Error()
			return evOSErr
		}
		if n == 0 {
			continue // (re-checks the deadline)
		}
		if fds[0].revents != 0 {
			return evFrame // readable, closed or failed: the read says which
		}
		return evOther
	}
}

func (s *stream) scratchOf(n int) []byte {
	if len(s.scratch) < n {
		s.scratch = make([]byte, n)
	}
	return s.scratch[:n]
}

// open authenticates and decrypts one record's body into pt (which may be the body itself).
func (s *stream) open(hdr, body, pt []byte) bool {
	s.setNonce()
	if _, err := s.aead.Open(pt[:0], s.nonce[:], body, hdr); err != nil {
		return false
	}
	s.counter++
	return true
}

const authFailed = "a record failed authentication (corrupted, replayed or forged); peer cut off"

// record handles one whole record (the checks and states of tcp_transport._record).
// inPlace: body lies where its plaintext belongs (a large record read into its target).
// Returns the event (evNone: read on) and whether the record was consumed (a frame that
// needs a buffer first is not).
func (s *stream) record(c *recvCall, hdr, body []byte, inPlace bool) (int, bool) {
	kind := hdr[12]
	c.stamp = math.Float64frombits(binary.LittleEndian.Uint64(hdr[4:12]))
	n := len(body) - tagSize
	frame := s.frame
	if kind == kData && !s.sized && s.size == 0 && s.parts == nil && !s.oversized {
		// a whole frame in one record (every small frame)
		var pt []byte
		switch {
		case frame != nil: // the buffer adopted for it
			pt = frame[:n]
		case int64(n) > s.maxFrame:
			pt = s.scratchOf(n)
		case n <= len(c.dst):
			pt = c.dst[:n]
		default:
			s.want = int64(n + tagSize)
			c.val = s.want
			return evNeed, false
		}
		if inPlace {
			pt = body[:n]
		}
		if !s.open(hdr, body, pt) {
			return s.fail(c, authFailed), true
		}
		c.val = int64(n)
		if frame != nil {
			s.frame = nil
			c.inFrame = 1
			return evFrame, true
		}
		if int64(n) > s.maxFrame {
			return evOversized, true
		}
		return evFrame, true
	}
	base := kind &^ more
	var pt []byte
	if base == kData && s.sized && frame != nil {
		if s.size+int64(n) > int64(len(frame)-tagSize) {
			return s.fail(c, "a frame longer than its size record"), true
		}
		pt = frame[s.size : s.size+int64(n)]
	} else if inPlace {
		pt = body[:n]
	} else {
		pt = s.scratchOf(n)
	}
	if !s.open(hdr, body, pt) {
		return s.fail(c, authFailed), true
	}
	switch base {
	case kHB:
		return evNone, true
	case kBye:
		c.val = int64(copy(c.dst, pt))
		return evBye, true
	case kSize:
		if n != 8 || s.size != 0 || s.parts != nil || frame != nil || s.oversized || s.sized {
			return s.fail(c, "a misplaced size record"), true
		}
		total := binary.LittleEndian.Uint64(pt)
		if total > uint64(s.maxFrame) {
			s.oversized = true // (its records are counted, then refused in order)
			return evNone, true
		}
		s.sized = true
		s.want = int64(total) + tagSize // (room for the last record's tag: records land in place)
		c.val = s.want
		return evNeed, true
	case kData:
	default:
		return s.fail(c, "unknown record kind %d", kind), true
	}
	s.size += int64(n)
	if s.sized {
		if kind&more != 0 {
			return evNone, true
		}
		if s.size != int64(len(frame)-tagSize) {
			return s.fail(c, "a frame shorter than its size record"), true
		}
		c.val, c.inFrame = s.size, 1
		s.frame, s.size, s.sized = nil, 0, false
		return evFrame, true
	}
	if s.size > s.maxFrame {
		s.oversized, s.parts = true, nil
	} else if !s.oversized {
		if s.parts == nil {
			s.parts = make([]byte, 0, n)
		}
		s.parts = append(s.parts, pt...)
	}
	if kind&more != 0 {
		return evNone, true
	}
	size := s.size
	if s.oversized {
		s.size, s.parts, s.oversized = 0, nil, false
		c.val = size
		return evOversized, true
	}
	if size <= int64(len(c.dst)) {
		copy(c.dst, s.parts)
		s.size, s.parts = 0, nil
		c.val = size
		return evFrame, true
	}
	s.want = size + tagSize // the caller gives a buffer; the next call copies the frame into it
	c.val = s.want
	return evNeed, true
}
