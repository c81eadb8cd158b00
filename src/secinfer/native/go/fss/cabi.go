// Package fss holds the native FSS kernels (DCF key generation and evaluation, the MMO hash;
// C inner loops in fss_dcf.c and fss_aes.c) and their cgo exports, bound in
// secinfer.crypto.fss.native.
package fss

// #include <stdint.h>
import "C"

import (
	"unsafe"

	"secinfer/native/internal/status"
)

// The export boundary of this package (see internal/status; cgo's C types are per package).
const (
	codeOK       = status.OK
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

func u64s(p *C.uint64_t, n int) []uint64 {
	if n == 0 {
		return nil
	}
	if p == nil {
		fail(codeArgument, "null uint64 buffer")
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(p)), n)
}
