package reclayer

// Frame templates: the fast path of a small frame of one array (issue #23 item 1).
//
// A secinfer frame (secinfer/net/codec.py) is magic | version | flags | header_len |
// session id | sender | tag | seq u64 | phase u8 | depth u32 | n_arrays u16 | array
// descriptions | padding | payload. Between two parties, the same tag with the same array
// layout repeats the same header bytes but for seq, phase and depth. A template holds those
// fixed bytes: pre (everything before seq) and post (the descriptions and the padding).
//
// Outgoing (rl_send_t): the frame is built here from a template, seq, phase, depth and the
// payload, sealed in place as one data record and offered to the socket: one call per
// frame. Incoming (rl_next_t): the next frame is received as rl_next does; when it is a
// small frame whose header bytes equal a template the caller registered (after checking a
// frame of exactly those bytes in full, codec.decode_frame) and whose seq is the one
// expected, the call says so (evChecked) with the frame's phase and depth, and the caller
// skips decoding the header. Any other frame is returned as before (evFrame) and decoded
// in full by the caller, which raises the same typed error as without templates.

// #include <stdint.h>
import "C"

import (
	"bytes"
	"encoding/binary"
	"syscall"
	"time"
	"unsafe"
)

const (
	tailSize  = 15   // seq u64 | phase u8 | depth u32 | n_arrays u16
	maxTmpls  = 4096 // templates per stream
	evChecked = 7    // a whole frame in dst whose header matched the template (info[4] phase, info[5] depth)
	badTmpl   = -3   // rl_send_t: no such template
)

type tmpl struct {
	pre, post []byte
	nbytes    int   // payload bytes
	narrays   uint16
}

// rl_tmpl sets template id of the stream (id < 0: a new one) to pre[:plen] (the frame
// header before seq), post[:qlen] (after n_arrays: descriptions and padding), a payload of
// nbytes bytes in narrays arrays. Returns the template's id, or -1 (unknown handle, too many
// templates, a frame larger than one record).
//
//export rl_tmpl
func rl_tmpl(h C.uint64_t, id C.int, pre unsafe.Pointer, plen C.int64_t, post unsafe.Pointer, qlen C.int64_t,
	nbytes C.int64_t, narrays C.int) C.int {
	s := lookup(h)
	if s == nil || plen < 0 || qlen < 0 || nbytes < 0 || narrays < 0 || narrays > 0xffff ||
		int64(plen)+tailSize+int64(qlen)+int64(nbytes) > sendRecord {
		return -1
	}
	t := &tmpl{pre: bytes.Clone(bytesAt(pre, int64(plen))), post: bytes.Clone(bytesAt(post, int64(qlen))),
		nbytes: int(nbytes), narrays: uint16(narrays)}
	if id < 0 {
		if len(s.tmpls) >= maxTmpls {
			return -1
		}
		s.tmpls = append(s.tmpls, t)
		return C.int(len(s.tmpls) - 1)
	}
	if int(id) >= len(s.tmpls) {
		return -1
	}
	s.tmpls[id] = t
	return id
}

func (t *tmpl) size() int { return len(t.pre) + tailSize + len(t.post) + t.nbytes }

// rl_send_t builds the frame of template id with seq, phase (phd >> 32), depth (phd's low
// 32 bits) and the template's payload size of bytes at body into the stream's send buffer,
// seals it as one data record and offers it to the socket once (as rl_send_small): the
// bytes the socket took (0: none; the caller writes the rest of the record, rl_outbuf[:frame
// size + 29]), -1 (unknown handle) or badTmpl.
//
//export rl_send_t
func rl_send_t(h C.uint64_t, stamp C.double, id C.int, seq C.uint64_t, phd C.uint64_t, body unsafe.Pointer) C.int64_t {
	s := lookup(h)
	if s == nil {
		return -1
	}
	if id < 0 || int(id) >= len(s.tmpls) {
		return badTmpl
	}
	t := s.tmpls[id]
	s.ensureOut()
	out := bytesAt(s.out, int64(s.outCap))
	m := t.size()
	pt := out[hdrSize : hdrSize+m]
	k := copy(pt, t.pre)
	binary.LittleEndian.PutUint64(pt[k:], uint64(seq))
	pt[k+8] = byte(phd >> 32)
	binary.LittleEndian.PutUint32(pt[k+9:], uint32(phd))
	binary.LittleEndian.PutUint16(pt[k+13:], t.narrays)
	k += tailSize
	k += copy(pt[k:], t.post)
	copy(pt[k:], bytesAt(body, int64(t.nbytes)))
	rec := s.seal(out, kData, float64(stamp), pt) // (in place: Seal's output overlaps its input exactly)
	w, _, e := syscall.RawSyscall6(syscall.SYS_SENDTO, uintptr(s.fd), uintptr(s.out), uintptr(rec),
		uintptr(syscall.MSG_DONTWAIT|syscall.MSG_NOSIGNAL), 0, 0)
	if e != 0 {
		return 0
	}
	return C.int64_t(w)
}

// rl_others sets the descriptors whose readability ends an rl_next_t wait (evOther).
//
//export rl_others
func rl_others(h C.uint64_t, fds *C.int32_t, n C.int) C.int {
	s := lookup(h)
	if s == nil {
		return -1
	}
	s.bound.others = append(s.bound.others[:0], unsafe.Slice((*int32)(unsafe.Pointer(fds)), int(n))...)
	return 0
}

// rl_next_t is rl_next into the bound scratch buffer, woken also by rl_others' descriptors,
// that checks a whole small frame against template id (id < 0: none) and the expected seq:
// evChecked when every header byte but seq, phase and depth equals the template's, seq
// is the expected one, the phase code is known and the frame is exactly as long as the
// template says (info[4] = phase code, info[5] = depth); evFrame when it is not.
//
//export rl_next_t
func rl_next_t(h C.uint64_t, waitUs C.int64_t, id C.int, seq C.uint64_t) C.int {
	s := lookup(h)
	if s == nil || s.bound.info == nil {
		return evBadHandle
	}
	b := &s.bound
	call := recvCall{dst: bytesAt(b.scratch, b.scap), wait: waitUs > 0, others: b.others}
	if call.wait {
		call.deadline = time.Now().Add(time.Duration(waitUs) * time.Microsecond)
	}
	ev := s.run(&call, b.info, b.stamp, b.errbuf, b.errlen)
	if ev != evFrame || call.inFrame != 0 || id < 0 || int(id) >= len(s.tmpls) {
		return C.int(ev)
	}
	t := s.tmpls[id]
	f := call.dst[:call.val]
	if ph, depth, ok := t.match(f, uint64(seq)); ok {
		out := unsafe.Slice((*int64)(b.info), 6)
		out[4], out[5] = ph, depth
		return evChecked
	}
	return C.int(ev)
}

// match: f is a frame of this template with seq (its phase code and depth).
func (t *tmpl) match(f []byte, seq uint64) (int64, int64, bool) {
	p, q := len(t.pre), len(t.post)
	if len(f) != t.size() || !bytes.Equal(f[:p], t.pre) || !bytes.Equal(f[p+tailSize:p+tailSize+q], t.post) {
		return 0, 0, false
	}
	tail := f[p : p+tailSize]
	if binary.LittleEndian.Uint64(tail) != seq || tail[8] >= 3 || binary.LittleEndian.Uint16(tail[13:]) != t.narrays {
		return 0, 0, false
	}
	return int64(tail[8]), int64(binary.LittleEndian.Uint32(tail[9:])), true
}
