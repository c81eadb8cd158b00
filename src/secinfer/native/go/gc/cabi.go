// Package gc holds the native garbling and evaluation of secinfer.crypto.gc circuits (half
// gates, fixed-key AES) and their cgo exports, bound in secinfer.crypto.gc.garble.
package gc

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
