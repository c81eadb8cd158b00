// Package ring64 holds small fixed-point kernels over Z_2^64 and their cgo exports, bound in
// secinfer.protocols.astra.encode_native.
package ring64

/*
#include <stdint.h>
*/
import "C"

import (
	"math"
	"unsafe"

	"secinfer/native/internal/status"
)

func recoverTo(rc *C.int, errbuf *C.char, errlen C.int) {
	if r := recover(); r != nil {
		code, msg := status.Decode(r)
		*rc = C.int(code)
		status.WriteErr(unsafe.Pointer(errbuf), int(errlen), msg)
	}
}

// r64_encode_mask adds the fixed-point encoding of x to lam in place, lam[i] += int64(floor(
// x[i] scale + 0.5)) mod 2^64, with the IEEE steps of secinfer.protocols.rep3.linear._enc
// (numpy: x 2^f, + 0.5, floor, the cast to int64): the product and the sum are rounded
// separately (the conversions forbid a fused multiply-add; with scale a power of two the
// product is exact anyway). x must be finite and its encodings in int64's range (the
// client checks its query offline); a value outside fails the call before anything is
// written.
//
//export r64_encode_mask
func r64_encode_mask(x *C.double, lam *C.uint64_t, n C.int64_t, scale C.double, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	if n < 0 {
		status.Fail(status.Argument, "encode: bad size %d", n)
	}
	xs := unsafe.Slice((*float64)(unsafe.Pointer(x)), int(n))
	ls := unsafe.Slice((*uint64)(unsafe.Pointer(lam)), int(n))
	s := float64(scale)
	for _, v := range xs {
		f := math.Floor(float64(float64(v*s) + 0.5))
		if !(f >= -9223372036854775808.0 && f < 9223372036854775808.0) {
			status.Fail(status.Argument, "encode: a value outside the ring's range")
		}
	}
	for i, v := range xs {
		ls[i] += uint64(int64(math.Floor(float64(float64(v*s) + 0.5))))
	}
	return 0
}
