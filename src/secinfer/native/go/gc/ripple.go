package gc

/*
#include <stdint.h>
*/
import "C"

import (
	"encoding/binary"
	"unsafe"

	"secinfer/native/internal/aesni"
	"secinfer/native/internal/status"
)

// rippleGroup instances share one cipher call per gate: two hashes each, eight blocks, the
// width of aesni's pipelined path (a smaller call falls back to one block at a time).
const rippleGroup = 4

// he_gc_eval_ripple evaluates secinfer.crypto.gc.circuit.msb_sub_ripple(l), y = msb(u1 -
// u2) xor u3 with a ripple carry, on the active labels of its three inputs: the same
// gates, gate ids, tweaks and hash as he_gc_eval / he_gc_eval_opened on that circuit's
// program (tested equal in tests/astra/test_ripple_eval.py), without the program, the wire
// array or the copies of the inputs into it. In the evaluator's view the circuit is
//
//	AND_0 = (u1_0, u2_0); c_1 = AND_0
//	AND_i = (c_i ^ u1_i, c_i ^ u2_i), c_{i+1} = c_i ^ AND_i   (i = 1 .. l-2)
//	y = u1_{l-1} ^ u2_{l-1} ^ c_{l-1} ^ u3
//
// (an INV gate is a copy for the evaluator, ONE folds into INVs, XOR is free), AND_i's
// tweaks 2 (inst (l-1) + i) and that plus one. tables: (batch, l-1, 2, 2) uint64; u1, u2:
// (batch, l, 2) labels as little-endian bytes at any alignment (a received frame's
// payload); u3: (batch, 2) uint64; out: (batch, 2) uint64, y's label.
//
//export he_gc_eval_ripple
func he_gc_eval_ripple(key *C.uchar, l, batch C.int, tables *C.uint64_t, u1, u2 *C.uchar, u3, out *C.uint64_t,
	errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	if l < 2 || l > 64 || batch < 1 {
		status.Fail(status.Argument, "gc ripple: bad sizes (l %d, batch %d)", l, batch)
	}
	nb, bs := int(l), int(batch)
	na := nb - 1
	tab := unsafe.Slice((*uint64)(unsafe.Pointer(tables)), bs*na*4)
	a1 := unsafe.Slice((*byte)(unsafe.Pointer(u1)), bs*nb*16)
	a2 := unsafe.Slice((*byte)(unsafe.Pointer(u2)), bs*nb*16)
	r3 := unsafe.Slice((*uint64)(unsafe.Pointer(u3)), bs*2)
	o := unsafe.Slice((*uint64)(unsafe.Pointer(out)), bs*2)
	rippleRun(gcCipher(key), nb, bs, tab, a1, a2, r3, o)
	return 0
}

func rippleRun(c *aesni.Cipher, nb, bs int, tab []uint64, a1, a2 []byte, r3, o []uint64) {
	na := nb - 1
	le := binary.LittleEndian
	var blk [16 * 2 * rippleGroup]byte
	var sv [4 * rippleGroup]uint64
	var c0, c1 [rippleGroup]uint64 // the carry's label per instance of the group
	for g0 := 0; g0 < bs; g0 += rippleGroup {
		g1 := min(g0+rippleGroup, bs)
		for i := 0; i < na; i++ {
			for inst := g0; inst < g1; inst++ {
				k, off := inst-g0, (inst*nb+i)*16
				x0, x1 := le.Uint64(a1[off:]), le.Uint64(a1[off+8:])
				y0, y1 := le.Uint64(a2[off:]), le.Uint64(a2[off+8:])
				if i > 0 {
					x0, x1, y0, y1 = x0^c0[k], x1^c1[k], y0^c0[k], y1^c1[k]
				}
				base := uint64(inst*na+i) * 2
				gcHashIn(blk[:], sv[:], 2*k, x0, x1, base)
				gcHashIn(blk[:], sv[:], 2*k+1, y0, y1, base+1)
			}
			c.EncryptBlocks(blk[:])
			for inst := g0; inst < g1; inst++ {
				k, off := inst-g0, (inst*nb+i)*16
				T := tab[(inst*na+i)*4 : (inst*na+i)*4+4]
				x0, x1 := le.Uint64(a1[off:]), le.Uint64(a1[off+8:])
				y0 := le.Uint64(a2[off:])
				if i > 0 {
					x0, x1, y0 = x0^c0[k], x1^c1[k], y0^c0[k]
				}
				ha0, ha1 := gcHashOut(blk[:], sv[:], 2*k)
				hb0, hb1 := gcHashOut(blk[:], sv[:], 2*k+1)
				v0, v1 := ha0^hb0, ha1^hb1
				if x0&1 == 1 {
					v0, v1 = v0^T[0], v1^T[1]
				}
				if y0&1 == 1 {
					v0, v1 = v0^T[2]^x0, v1^T[3]^x1
				}
				if i > 0 {
					v0, v1 = v0^c0[k], v1^c1[k]
				}
				c0[k], c1[k] = v0, v1
			}
		}
		for inst := g0; inst < g1; inst++ {
			k, off := inst-g0, (inst*nb+na)*16
			o[2*inst] = le.Uint64(a1[off:]) ^ le.Uint64(a2[off:]) ^ c0[k] ^ r3[2*inst]
			o[2*inst+1] = le.Uint64(a1[off+8:]) ^ le.Uint64(a2[off+8:]) ^ c1[k] ^ r3[2*inst+1]
		}
	}
}
