// Package status is the error vocabulary every export of the native library shares: the
// status codes (mirrored in secinfer/native/errors.py, STATUS_ERRORS), the panic value that
// carries a code and message to the export boundary, and writing a message into the
// caller's buffer. It holds no cgo types: each cgo package keeps a three-line recoverTo that
// converts with these helpers (cgo's C types are per package).
package status

import (
	"fmt"
	"unsafe"
)

// Status codes returned by every export (0 = ok).
const (
	OK       = 0
	HE       = 1 // generic HE failure (Lattigo returned an error)
	Serial   = 2 // bytes that do not decode to the expected object
	Mismatch = 3 // objects bound to different parameter sets
	Argument = 4 // bad argument (unknown handle, wrong object kind, bad sizes)
	Internal = 5 // recovered panic inside Lattigo or a kernel
)

// Failure is the panic value raised by Fail and turned into a status code by Decode.
type Failure struct {
	Code int
	Msg  string
}

// Fail aborts the current export with a status code and message.
func Fail(code int, format string, a ...any) {
	panic(Failure{code, fmt.Sprintf(format, a...)})
}

// Check fails with code when err is not nil.
func Check(err error, code int, what string) {
	if err != nil {
		Fail(code, "%s: %v", what, err)
	}
}

// Decode maps a recovered panic value to a status code and message.
func Decode(r any) (int, string) {
	switch v := r.(type) {
	case Failure:
		return v.Code, v.Msg
	case error:
		return Internal, "internal error: " + v.Error()
	default:
		return Internal, fmt.Sprintf("internal error: %v", v)
	}
}

// WriteErr writes msg, NUL-terminated and truncated to fit, into the caller's buffer.
func WriteErr(errbuf unsafe.Pointer, errlen int, msg string) {
	if errbuf == nil || errlen <= 0 {
		return
	}
	buf := unsafe.Slice((*byte)(errbuf), errlen)
	n := copy(buf[:len(buf)-1], msg)
	buf[n] = 0
}
