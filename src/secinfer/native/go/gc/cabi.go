// Package gc holds the native garbling and evaluation of secinfer.crypto.gc circuits (half
// gates, fixed-key AES) and their cgo exports, bound in secinfer.crypto.gc.garble.
package gc

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
