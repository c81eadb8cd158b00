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

// recoverTo converts a panic into a status code and an error message; every export defers
// it directly. (cgo's C types are per package, so each cgo package has its own copy of
// these few lines; the logic is in internal/status.)
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
		status.Fail(status.Argument, "null uint64 buffer")
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(p)), n)
}
