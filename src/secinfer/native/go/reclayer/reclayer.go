// Package reclayer is the native record layer of secinfer's tcp transport
// (secinfer/net/tcp_transport.py, tcp_links.py; bound in secinfer/net/native_link.py).
//
// It speaks exactly the wire format of the Python record layer: records
// length u32 | stamp f64 | kind u8 | AES-256-GCM(plaintext), little-endian, nonce = 4 zero
// bytes | the stream's record counter (u64), the 13-byte header as associated data. Kinds:
// D (0x44, bit 0x80 = the frame continues in the next record), S (0x53, the u64 size of a
// frame of several records), H (0x48, heartbeat), B (0x42, bye).
//
// A stream is one direction of one TCP connection, already keyed by the Python handshake
// (tcp_handshake.py): an outgoing stream seals records (and sends a small one itself, with
// one non-blocking system call), an incoming stream reads and opens records and returns one
// event per call (a whole frame, a buffer request for a large frame, a bye, an oversized
// frame, end of stream, a failure). What a record means for the protocol (inbox, limits,
// timeouts, liveness) stays in Python; the checks on the records themselves (length,
// authentication, order through the counter, size records) are the same as the Python
// parser's and fail with the same messages.
//
// Concurrency: the Python side guarantees that one stream is used by one thread at a time
// (the link's wire lock, the endpoint's read lock); the handle table has its own mutex.
// Memory the caller passes (frames, buffers) is only used during the call, except the
// buffer of a large frame being received, which the caller keeps alive until the frame's
// event (it holds it as InStream.frame).
package reclayer

// #include <stdint.h>
// #include <stdlib.h>
import "C"

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"math"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

const (
	hdrSize    = 13
	tagSize    = 16
	maxRecord  = 1 << 24 // the largest record plaintext a receiver accepts (tcp_links.RECORD)
	sendRecord = 1 << 20 // the largest we send (tcp_links.SEND_RECORD)
	rxBuffer   = 1 << 18 // receive buffer per stream (tcp_links.RX_BUFFER)

	kData = 0x44
	kHB   = 0x48
	kBye  = 0x42
	kSize = 0x53
	more  = 0x80
)

// Events returned by rl_recv (mirrored in native_link.py).
const (
	evNone      = 0  // nothing (more) to read now, or the wait elapsed
	evFrame     = 1  // a whole frame: info[0] bytes, in dst (info[1] = 0) or in the adopted buffer (1)
	evNeed      = 2  // the next frame needs a buffer of info[0] bytes: call again with it as dst
	evBye       = 3  // a bye: its first info[0] reason bytes in dst
	evOversized = 4  // a frame of info[0] bytes above max_frame (its records were authenticated, then dropped)
	evEOF       = 5  // the peer closed the stream
	evOther     = 6  // while waiting, another of the given descriptors became readable
	evFrameErr  = -1 // a record that breaks the format or fails authentication (message in errbuf)
	evOSErr     = -2 // the connection failed (message in errbuf)
	evBadHandle = -3
)

type stream struct {
	fd      int
	aead    cipher.AEAD
	counter uint64
	nonce   [12]byte
	// outgoing: the sealed record of the last send, C memory the caller may view
	out    unsafe.Pointer
	outCap int
	// incoming
	maxFrame  int64
	rx        []byte // received bytes not yet parsed: rx[pos:fill]
	pos, fill int
	want      int64  // a buffer of this many bytes is asked for (evNeed), 0 if none
	frame     []byte // the adopted buffer of the frame being received (caller's memory)
	sized     bool   // frame follows a size record (else: a single large record)
	size      int64  // plaintext bytes of the current frame received so far
	parts     []byte // plaintext of a frame of several records without a size record
	oversized bool
	scratch   []byte // records opened only to be checked (heartbeats, byes, dropped frames)
	big       []byte // a record larger than rx being read where it belongs, its header, bytes so far
	bigHdr    [hdrSize]byte
	bigGot    int
	got       int64 // bytes read from the socket during the current call
	bound     boundMem
	tmpls     []*tmpl // frame templates (frames.go)
	// busy-poll before blocking (rl_spin, recv.go)
	spin                 time.Duration
	spinYield            bool
	spinHits, spinMisses int64
	spinRun, spinSkip    int // budgets run out in a row; waits left that block at once
}

// boundMem is the caller's memory an incoming stream reports into (rl_bind, rl_next).
type boundMem struct {
	scratch     unsafe.Pointer
	scap        int64
	info, stamp unsafe.Pointer
	errbuf      unsafe.Pointer
	errlen      int
	others      []int32 // rl_others: descriptors that end an rl_next_t wait
}

var (
	mu      sync.Mutex
	streams = map[uint64]*stream{}
	next    uint64
)

func lookup(h C.uint64_t) *stream {
	mu.Lock()
	s := streams[uint64(h)]
	mu.Unlock()
	return s
}

func (s *stream) setNonce() {
	binary.LittleEndian.PutUint64(s.nonce[4:], s.counter)
}

// abiVersion changes whenever an export's arguments or meaning change (native_link.py
// refuses a library of another version and uses the Python record layer).
const abiVersion = 4

// rl_abi is the version of these exports.
//
//export rl_abi
func rl_abi() C.int { return abiVersion }

// rl_new keys a stream on descriptor fd (not owned: the caller closes it) with a 32-byte
// AES-256-GCM key, starting at record counter; maxFrame bounds received frames. Writes
// the handle into *out; returns 0, or -1 for a bad key.
//
//export rl_new
func rl_new(fd C.int, key *C.uchar, counter C.uint64_t, maxFrame C.int64_t, out *C.uint64_t) C.int {
	block, err := aes.NewCipher(C.GoBytes(unsafe.Pointer(key), 32))
	if err != nil {
		return -1
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return -1
	}
	s := &stream{fd: int(fd), aead: aead, counter: uint64(counter), maxFrame: int64(maxFrame)}
	mu.Lock()
	next++
	h := next
	streams[h] = s
	mu.Unlock()
	*out = C.uint64_t(h)
	return 0
}

// rl_free forgets a stream and frees its buffers (the caller no longer uses it).
//
//export rl_free
func rl_free(h C.uint64_t) {
	mu.Lock()
	s := streams[uint64(h)]
	delete(streams, uint64(h))
	mu.Unlock()
	if s != nil && s.out != nil {
		C.free(s.out)
		s.out = nil
	}
}

// rl_counter is the stream's next record counter (tests: both layers agree).
//
//export rl_counter
func rl_counter(h C.uint64_t) C.int64_t {
	s := lookup(h)
	if s == nil {
		return -1
	}
	return C.int64_t(s.counter)
}

// rl_outbuf gives the stream's send buffer (C memory of *cap bytes, kept until rl_free):
// rl_send_small seals its record there, and rl_seal may seal into it.
//
//export rl_outbuf
func rl_outbuf(h C.uint64_t, capOut *C.int64_t) unsafe.Pointer {
	s := lookup(h)
	if s == nil {
		return nil
	}
	s.ensureOut()
	*capOut = C.int64_t(s.outCap)
	return s.out
}

func (s *stream) ensureOut() {
	if s.out == nil {
		s.outCap = hdrSize + sendRecord + tagSize
		s.out = C.malloc(C.size_t(s.outCap))
	}
}

// seal writes header and ciphertext of one record of plaintext pt into dst (len >= 13 +
// len(pt) + 16) and advances the counter.
func (s *stream) seal(dst []byte, kind byte, stamp float64, pt []byte) int {
	n := len(pt) + tagSize
	binary.LittleEndian.PutUint32(dst[0:4], uint32(n))
	binary.LittleEndian.PutUint64(dst[4:12], math.Float64bits(stamp))
	dst[12] = kind
	s.setNonce()
	s.counter++
	s.aead.Seal(dst[hdrSize:hdrSize], s.nonce[:], pt, dst[:hdrSize])
	return hdrSize + n
}

func bytesAt(p unsafe.Pointer, n int64) []byte {
	if n == 0 || p == nil {
		return []byte{}
	}
	return unsafe.Slice((*byte)(p), int(n))
}

// rl_seal seals one record of kind with n plaintext bytes at pt into dst (room for n + 29
// bytes) and returns its length, or -1 (unknown handle, record too large).
//
//export rl_seal
func rl_seal(h C.uint64_t, kind C.int, stamp C.double, pt unsafe.Pointer, n C.int64_t, dst unsafe.Pointer) C.int64_t {
	s := lookup(h)
	if s == nil || n < 0 || n > maxRecord {
		return -1
	}
	out := bytesAt(dst, int64(n)+hdrSize+tagSize)
	return C.int64_t(s.seal(out, byte(kind), float64(stamp), bytesAt(pt, int64(n))))
}

// rl_send_small seals a frame of n <= 1 MiB bytes as one data record into the stream's
// send buffer and offers it to the socket once, without waiting (MSG_DONTWAIT, no
// SIGPIPE). Returns the bytes the socket took (0 when it took none or failed: the caller
// writes the rest of the record, rl_outbuf[:n + 29], and learns why), or -1.
//
//export rl_send_small
func rl_send_small(h C.uint64_t, stamp C.double, pt unsafe.Pointer, n C.int64_t) C.int64_t {
	s := lookup(h)
	if s == nil || n < 0 || n > sendRecord {
		return -1
	}
	s.ensureOut()
	out := bytesAt(s.out, int64(s.outCap))
	m := s.seal(out, kData, float64(stamp), bytesAt(pt, int64(n)))
	k, _, e := syscall.RawSyscall6(syscall.SYS_SENDTO, uintptr(s.fd), uintptr(s.out), uintptr(m),
		uintptr(syscall.MSG_DONTWAIT|syscall.MSG_NOSIGNAL), 0, 0)
	if e != 0 {
		return 0
	}
	return C.int64_t(k)
}
