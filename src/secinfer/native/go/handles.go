// The thin cgo layer between secinfer's Python HE API and Lattigo v6: the handle table.
//
// Every Lattigo object lives in a handle table; Python holds opaque uint64 handles and
// exchanges bytes and flat numeric arrays. Every exported function returns a status code
// (0 = ok) and writes a message into a caller-provided buffer on failure; panics are
// recovered at the export boundary so bad input never crashes the Python process.

package main

/*
#include <stdint.h>
#include <stdlib.h>
*/
import "C"

import (
	"sync"
	"unsafe"

	"secinfer/native/he"
	"secinfer/native/internal/status"
)

// Status codes: see internal/status (mirrored in secinfer/native/errors.py, STATUS_ERRORS).
const (
	codeOK       = status.OK
	codeHE       = status.HE
	codeSerial   = status.Serial
	codeMismatch = status.Mismatch
	codeArgument = status.Argument
	codeInternal = status.Internal
)

func fail(code int, format string, a ...any) { status.Fail(code, format, a...) }

func check(err error, code int, what string) { status.Check(err, code, what) }

// recoverTo converts a panic into a status code and an error message; it must be
// deferred directly by every export.
func recoverTo(rc *C.int, errbuf *C.char, errlen C.int) {
	if r := recover(); r != nil {
		code, msg := status.Decode(r)
		*rc = C.int(code)
		writeErr(errbuf, errlen, msg)
	}
}

func writeErr(errbuf *C.char, errlen C.int, msg string) {
	status.WriteErr(unsafe.Pointer(errbuf), int(errlen), msg)
}

// ---------------------------------------------------------------- handle table

var (
	tableMu sync.Mutex
	table   = map[uint64]any{}
	nextH   uint64
)

func put(o any) uint64 {
	tableMu.Lock()
	defer tableMu.Unlock()
	nextH++
	table[nextH] = o
	return nextH
}

func getAny(h uint64) any {
	tableMu.Lock()
	defer tableMu.Unlock()
	o, ok := table[h]
	if !ok {
		fail(codeArgument, "unknown or freed handle %d", h)
	}
	return o
}

func get[T any](h uint64, kind string) T {
	o := getAny(h)
	v, ok := o.(T)
	if !ok {
		fail(codeArgument, "handle %d is a %T, expected %s", h, o, kind)
	}
	return v
}

//export he_free_handle
func he_free_handle(h C.uint64_t) {
	tableMu.Lock()
	o := table[uint64(h)]
	delete(table, uint64(h))
	tableMu.Unlock()
	if c, ok := o.(*CT); ok && c.pool != nil {
		he.Recycle(c.v, c.pool)
	}
}

//export he_live_handles
func he_live_handles() C.int64_t {
	tableMu.Lock()
	defer tableMu.Unlock()
	return C.int64_t(len(table))
}

//export he_free
func he_free(p unsafe.Pointer) {
	C.free(p)
}

//export he_version
func he_version(out *C.char, outlen C.int) (rc C.int) {
	defer recoverTo(&rc, out, outlen)
	writeErr(out, outlen, "secinfer-he/1 lattigo/v6.1.1")
	return codeOK
}

// outBytes copies b into C memory owned by the caller (freed with he_free).
func outBytes(b []byte, out **C.uchar, outlen *C.size_t) {
	p := C.malloc(C.size_t(len(b) + 1))
	if p == nil {
		fail(codeInternal, "out of memory")
	}
	copy(unsafe.Slice((*byte)(p), len(b)), b)
	*out = (*C.uchar)(p)
	*outlen = C.size_t(len(b))
}

func inBytes(p *C.uchar, n C.size_t) []byte {
	if n == 0 {
		return []byte{}
	}
	if p == nil {
		fail(codeArgument, "null byte buffer")
	}
	return C.GoBytes(unsafe.Pointer(p), C.int(n))
}

func f64s(p *C.double, n int) []float64 {
	if n == 0 {
		return nil
	}
	if p == nil {
		fail(codeArgument, "null float64 buffer")
	}
	return unsafe.Slice((*float64)(unsafe.Pointer(p)), n)
}

func u64s(p *C.uint64_t, n int) []uint64 {
	if n == 0 {
		return nil
	}
	if p == nil {
		fail(codeArgument, "null uint64 buffer")
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(p)), n)
}

func i64s(p *C.int64_t, n int) []int64 {
	if n == 0 {
		return nil
	}
	if p == nil {
		fail(codeArgument, "null int64 buffer")
	}
	return unsafe.Slice((*int64)(unsafe.Pointer(p)), n)
}

// withLock runs f holding mu; a panic inside f still releases mu (the export's recover
// then reports it), so one bad call never deadlocks later ones.
func withLock(mu *sync.Mutex, f func()) {
	mu.Lock()
	defer mu.Unlock()
	f()
}
