package gc

/*
#include <stdint.h>
*/
import "C"

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"sync"
	"unsafe"

	"secinfer/native/internal/aesni"
	"secinfer/native/internal/status"
)

// Garbled circuits for secinfer.crypto.gc: free-XOR + half-gates garbling and evaluation
// over a flat gate program, the same arithmetic as the numpy reference in
// secinfer/crypto/gc/garble.py (tested equal there), one gate at a time with AES-NI
// instead of one numpy call per level. Labels are 128-bit values stored as two uint64
// words (little-endian in memory); the permute bit is bit 0 of word 0.
//
// Gate hash (tweakable correlation-robust hash from a fixed-key permutation):
//     H(L, t) = AES_K(sigma(L) xor t) xor sigma(L),  sigma(w0, w1) = (w0 xor w1, w0),
// the tweak xored into word 0 only. The program is int32 rows (op, a, b, out, gid) with
// op 0 = XOR, 1 = INV, 2 = AND; an AND gate's tweaks are 2 (inst * nAnd + gid) and that
// plus one, gid its index in the tables.

const (
	gcXOR = 0
	gcINV = 1
	gcAND = 2
)

var (
	gcCipherMu sync.Mutex
	gcCiphers  = map[[16]byte]*aesni.Cipher{}
)

func gcCipher(key *C.uchar) *aesni.Cipher {
	var k [16]byte
	copy(k[:], unsafe.Slice((*byte)(unsafe.Pointer(key)), 16))
	gcCipherMu.Lock()
	defer gcCipherMu.Unlock()
	b, ok := gcCiphers[k]
	if !ok {
		var err error
		b, err = aesni.New(k[:])
		status.Check(err, status.Argument, "gc key")
		gcCiphers[k] = b
	}
	return b
}

// gcGroup instances are walked together, gate by gate, so that the hashes of one gate in
// all of them go to the cipher in one call (“aesni“: eight blocks in flight with AES-NI
// against one per call, ~2.5 ns a block instead of ~40).
const gcGroup = 16

// gcHashIn writes the block of H((w0, w1), t) = AES(sigma(w) xor t) xor sigma(w),
// sigma(w0, w1) = (w0 xor w1, w0), the tweak xored into word 0, at blk[16k:] and keeps
// sigma(w) in sv[2k:] for gcHashOut.
func gcHashIn(blk []byte, sv []uint64, k int, w0, w1, t uint64) {
	s0 := w0 ^ w1
	binary.LittleEndian.PutUint64(blk[16*k:], s0^t)
	binary.LittleEndian.PutUint64(blk[16*k+8:], w0)
	sv[2*k], sv[2*k+1] = s0, w0
}

// gcHashOut returns hash k after the blocks were encrypted.
func gcHashOut(blk []byte, sv []uint64, k int) (uint64, uint64) {
	return binary.LittleEndian.Uint64(blk[16*k:]) ^ sv[2*k], binary.LittleEndian.Uint64(blk[16*k+8:]) ^ sv[2*k+1]
}

func gcArgs(prog *C.int32_t, nprog, nAnd, nWires, batch C.int) ([]int32, int, int, int) {
	if nprog < 0 || nAnd < 0 || nWires < 1 || batch < 1 {
		status.Fail(status.Argument, "gc: bad sizes (program %d, and %d, wires %d, batch %d)", nprog, nAnd, nWires, batch)
	}
	p := unsafe.Slice((*int32)(unsafe.Pointer(prog)), int(nprog)*5)
	nw, na := int32(nWires), int32(nAnd)
	for i := 0; i < int(nprog); i++ {
		op, a, b, o, g := p[5*i], p[5*i+1], p[5*i+2], p[5*i+3], p[5*i+4]
		if op < gcXOR || op > gcAND || a < 0 || a >= nw || o < 0 || o >= nw ||
			(op != gcINV && (b < 0 || b >= nw)) || (op == gcAND && (g < 0 || g >= na)) {
			status.Fail(status.Argument, "gc: program row %d out of range", i)
		}
	}
	return p, int(nAnd), int(nWires), int(batch)
}

// gcRun walks the program over every instance: the evaluator (garble == false) turns
// active labels into active labels with the tables; the garbler (garble == true) turns
// zero-labels into zero-labels and writes the tables (T_G, T_E) of every AND gate.
// Instances go in groups of gcGroup, gate by gate (the same gates, in the same order, for
// each instance as one at a time: the outputs do not change).
func gcRun(c *aesni.Cipher, p []int32, na, nw, bs int, tab, w []uint64, garble bool, r0, r1 uint64) {
	per := 2 // hashes per AND gate and instance
	if garble {
		per = 4
	}
	blk := make([]byte, 16*per*gcGroup)
	sv := make([]uint64, 2*per*gcGroup)
	for g0 := 0; g0 < bs; g0 += gcGroup {
		g1 := g0 + gcGroup
		if g1 > bs {
			g1 = bs
		}
		for i := 0; i+5 <= len(p); i += 5 {
			a, b, o := int(p[i+1])*2, int(p[i+2])*2, int(p[i+3])*2
			switch p[i] {
			case gcXOR:
				for inst := g0; inst < g1; inst++ {
					W := w[inst*nw*2 : (inst+1)*nw*2]
					W[o], W[o+1] = W[a]^W[b], W[a+1]^W[b+1]
				}
			case gcINV:
				for inst := g0; inst < g1; inst++ {
					W := w[inst*nw*2 : (inst+1)*nw*2]
					if garble {
						W[o], W[o+1] = W[a]^r0, W[a+1]^r1
					} else {
						W[o], W[o+1] = W[a], W[a+1]
					}
				}
			default:
				g := int(p[i+4])
				k := 0
				for inst := g0; inst < g1; inst++ {
					W := w[inst*nw*2 : (inst+1)*nw*2]
					base := uint64(inst*na+g) * 2
					a0, a1, b0, b1 := W[a], W[a+1], W[b], W[b+1]
					gcHashIn(blk, sv, k, a0, a1, base)
					gcHashIn(blk, sv, k+1, b0, b1, base+1)
					if garble {
						gcHashIn(blk, sv, k+2, a0^r0, a1^r1, base)
						gcHashIn(blk, sv, k+3, b0^r0, b1^r1, base+1)
					}
					k += per
				}
				c.EncryptBlocks(blk[:16*k])
				k = 0
				for inst := g0; inst < g1; inst++ {
					W := w[inst*nw*2 : (inst+1)*nw*2]
					T := tab[inst*na*4 : (inst+1)*na*4]
					a0, a1, b0 := W[a], W[a+1], W[b]
					ha0, ha1 := gcHashOut(blk, sv, k)
					hb0, hb1 := gcHashOut(blk, sv, k+1)
					if garble { // half gates [Zahur-Rosulek-Evans]
						hA0, hA1 := gcHashOut(blk, sv, k+2)
						hB0, hB1 := gcHashOut(blk, sv, k+3)
						T[4*g], T[4*g+1] = ha0^hA0, ha1^hA1
						if b0&1 == 1 {
							T[4*g], T[4*g+1] = T[4*g]^r0, T[4*g+1]^r1
						}
						T[4*g+2], T[4*g+3] = hb0^hB0^a0, hb1^hB1^a1
					}
					k += per
					o0, o1 := ha0^hb0, ha1^hb1
					if a0&1 == 1 {
						o0, o1 = o0^T[4*g], o1^T[4*g+1]
					}
					if b0&1 == 1 {
						o0, o1 = o0^T[4*g+2]^a0, o1^T[4*g+3]^a1
					}
					W[o], W[o+1] = o0, o1
				}
			}
		}
	}
}

//export he_gc_eval
func he_gc_eval(key *C.uchar, prog *C.int32_t, nprog, nAnd, nWires, batch C.int, tables, wires *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	p, na, nw, bs := gcArgs(prog, nprog, nAnd, nWires, batch)
	tab := unsafe.Slice((*uint64)(unsafe.Pointer(tables)), bs*na*4)
	w := unsafe.Slice((*uint64)(unsafe.Pointer(wires)), bs*nw*2)
	gcRun(gcCipher(key), p, na, nw, bs, tab, w, false, 0, 0)
	return 0
}

//export he_gc_garble
func he_gc_garble(key *C.uchar, prog *C.int32_t, nprog, nAnd, nWires, batch C.int, r, tables, wires *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	p, na, nw, bs := gcArgs(prog, nprog, nAnd, nWires, batch)
	R := unsafe.Slice((*uint64)(unsafe.Pointer(r)), 2)
	if R[0]&1 != 1 {
		status.Fail(status.Argument, "gc: the offset R must have its permute bit set")
	}
	tab := unsafe.Slice((*uint64)(unsafe.Pointer(tables)), bs*na*4)
	w := unsafe.Slice((*uint64)(unsafe.Pointer(wires)), bs*nw*2)
	gcRun(gcCipher(key), p, na, nw, bs, tab, w, true, R[0], R[1])
	return 0
}

// he_label_hash writes SHA-256(prefix || label bytes) for n labels of 16 bytes.
//
//export he_label_hash
func he_label_hash(prefix *C.uchar, plen C.int, labels *C.uint64_t, n C.int, out *C.uchar, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	if plen < 0 || plen > 64 || n < 0 {
		status.Fail(status.Argument, "label hash: bad sizes")
	}
	pre := unsafe.Slice((*byte)(unsafe.Pointer(prefix)), int(plen))
	lab := unsafe.Slice((*byte)(unsafe.Pointer(labels)), int(n)*16)
	dst := unsafe.Slice((*byte)(unsafe.Pointer(out)), int(n)*32)
	buf := make([]byte, 0, int(plen)+16)
	for i := 0; i < int(n); i++ {
		buf = append(append(buf[:0], pre...), lab[16*i:16*i+16]...)
		sum := sha256.Sum256(buf)
		copy(dst[32*i:], sum[:])
	}
	return 0
}

// he_gc_eval_opened is the evaluator's online step in one call: place the opened labels of
// one input group (LSB first, bit j of values[i] for instance i), check each against its
// hash commitment SHA-256(prefix || label) (coms: (batch, width, 2, 32), nil to skip; a
// mismatch sets *bad and evaluates nothing), evaluate, and copy the output wires' labels
// to out (batch, nout, 2). wires holds the other inputs' labels (prepared offline) and is
// overwritten.
//
//export he_gc_eval_opened
func he_gc_eval_opened(key *C.uchar, prog *C.int32_t, nprog, nAnd, nWires, batch C.int, tables, wires *C.uint64_t,
	group *C.int32_t, width C.int, labels *C.uint64_t, coms *C.uchar, values *C.uint64_t, prefix *C.uchar, plen C.int,
	outIdx *C.int32_t, nout C.int, out *C.uint64_t, bad *C.int, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	p, na, nw, bs := gcArgs(prog, nprog, nAnd, nWires, batch)
	if width < 1 || width > 64 || nout < 0 || plen < 0 || plen > 64 {
		status.Fail(status.Argument, "gc: bad group width %d, outputs %d or prefix %d", width, nout, plen)
	}
	wd, no := int(width), int(nout)
	g := unsafe.Slice((*int32)(unsafe.Pointer(group)), wd)
	oi := unsafe.Slice((*int32)(unsafe.Pointer(outIdx)), no)
	for _, x := range append(append([]int32{}, g...), oi...) {
		if x < 0 || int(x) >= nw {
			status.Fail(status.Argument, "gc: wire index %d out of range", x)
		}
	}
	lab := unsafe.Slice((*uint64)(unsafe.Pointer(labels)), bs*wd*2)
	w := unsafe.Slice((*uint64)(unsafe.Pointer(wires)), bs*nw*2)
	*bad = 0
	if coms != nil {
		cm := unsafe.Slice((*byte)(unsafe.Pointer(coms)), bs*wd*64)
		vals := unsafe.Slice((*uint64)(unsafe.Pointer(values)), bs)
		pre := unsafe.Slice((*byte)(unsafe.Pointer(prefix)), int(plen))
		buf := make([]byte, int(plen)+16)
		copy(buf, pre)
		for i := 0; i < bs; i++ {
			for j := 0; j < wd; j++ {
				k := (i*wd + j) * 2
				binary.LittleEndian.PutUint64(buf[plen:], lab[k])
				binary.LittleEndian.PutUint64(buf[int(plen)+8:], lab[k+1])
				sum := sha256.Sum256(buf)
				b := (vals[i] >> uint(j)) & 1
				off := ((i*wd+j)*2 + int(b)) * 32
				if subtle.ConstantTimeCompare(sum[:], cm[off:off+32]) != 1 {
					*bad = 1
					return 0
				}
			}
		}
	}
	for i := 0; i < bs; i++ {
		for j, x := range g {
			w[(i*nw+int(x))*2], w[(i*nw+int(x))*2+1] = lab[(i*wd+j)*2], lab[(i*wd+j)*2+1]
		}
	}
	tab := unsafe.Slice((*uint64)(unsafe.Pointer(tables)), bs*na*4)
	gcRun(gcCipher(key), p, na, nw, bs, tab, w, false, 0, 0)
	o := unsafe.Slice((*uint64)(unsafe.Pointer(out)), bs*no*2)
	for i := 0; i < bs; i++ {
		for j, x := range oi {
			o[(i*no+j)*2], o[(i*no+j)*2+1] = w[(i*nw+int(x))*2], w[(i*nw+int(x))*2+1]
		}
	}
	return 0
}
