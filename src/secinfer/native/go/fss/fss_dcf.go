package fss

/*
#include <stddef.h>
#include <stdint.h>
void fss_dcf_eval_chunk(const uint64_t *shape, int party, int64_t B, int64_t perK, int64_t j0, int64_t cnt,
    const uint64_t *seed, const uint64_t *scw, const uint8_t *tcw, const uint8_t *vcw,
    const uint64_t *final, const uint64_t *x, uint64_t *out, uint64_t *scratch, int aesni);
void fss_dcf_gen_chunk(const uint64_t *shape, int64_t B, int64_t k0, int64_t cnt, const uint64_t *alpha,
    const uint64_t *beta, const uint64_t *root0, const uint64_t *root1, uint64_t *scw,
    uint8_t *tcw, uint8_t *vcw, uint64_t *final, uint64_t *scratch, int aesni);
*/
import "C"

import (
	"runtime"
	"unsafe"

	"secinfer/native/internal/status"
)

// The exports of the native DCF [BCG+21 Fig. 1] (secinfer/crypto/fss/native.py binds them):
// this file checks every argument and buffer length, then runs the kernels of fss_dcf.c
// over chunks of keys (generation) or points (evaluation) on up to `threads` goroutines.
// Every chunk writes only its own keys' outputs, so results do not depend on the schedule
// or the thread count. Scratch memory is Go memory without pointers, handed to C for the
// duration of one call; neither side keeps a pointer into the caller's buffers after the
// export returns. The kernels produce the numpy implementation's keys byte for byte
// (dcf.py is the reference; tests/fss/test_fss_native.py compares them).

const (
	dcfEvalChunk = 128 // points per work item
	dcfGenChunk  = 64  // keys per work item
	dcfMaxCount  = 1 << 40
	dcfMaxWords  = 1 << 12
)

// Shape table layout, shared with fss_dcf.c: header, then 6 words per payload entry.
const (
	shN, shLim, shPay, shWords, shNV, shW, shHdr            = 0, 1, 2, 3, 4, 5, 6
	eOff, eBytes, eLoMask, eHiMask, eMask0, eMask1, eStride = 0, 1, 2, 3, 4, 5, 6
)

type dcfShape struct {
	n, lim, pay, words, nv, tb, w int
	table                         []uint64
}

// byteMask: a word's low nb bytes (nb <= 0: none, nb >= 8: all).
func byteMask(nb int) uint64 {
	if nb <= 0 {
		return 0
	}
	if nb >= 8 {
		return ^uint64(0)
	}
	return (uint64(1) << (8 * nb)) - 1
}

func bitMask(width int) uint64 {
	if width >= 64 {
		return ^uint64(0)
	}
	return (uint64(1) << width) - 1
}

func newDCFShape(n, outBits, pay int, bitsPtr *C.int32_t, nbits int64) *dcfShape {
	if n < 1 || n > 64 {
		status.Fail(status.Argument, "DCF domain bits must be in 1..64, got %d", n)
	}
	if outBits < 1 || outBits > 128 {
		status.Fail(status.Argument, "DCF output group Z_2^k needs 1 <= k <= 128, got %d", outBits)
	}
	lim := 1
	if outBits > 64 {
		lim = 2
	}
	if pay < 1 || pay*lim > dcfMaxWords || nbits != int64(pay) {
		status.Fail(status.Argument, "DCF payload of %d entries with %d bit widths", pay, nbits)
	}
	if bitsPtr == nil {
		status.Fail(status.Argument, "null entry-width buffer")
	}
	eb := unsafe.Slice((*int32)(unsafe.Pointer(bitsPtr)), pay)
	sh := &dcfShape{n: n, lim: lim, pay: pay, words: pay * lim, nv: (pay*lim + 1) / 2, tb: (2*n + 7) / 8}
	sh.table = make([]uint64, shHdr+eStride*pay)
	for p := 0; p < pay; p++ {
		b := int(eb[p])
		if b < 1 || b > outBits {
			status.Fail(status.Argument, "DCF payload entry %d has %d bits, outside 1..%d", p, b, outBits)
		}
		nb := (b + 7) / 8
		e := sh.table[shHdr+eStride*p : shHdr+eStride*(p+1)]
		e[eOff], e[eBytes] = uint64(sh.w), uint64(nb)
		e[eLoMask], e[eHiMask] = byteMask(nb), byteMask(nb-8)
		e[eMask0] = bitMask(b)
		if lim == 2 {
			e[eMask1] = bitMask(max(b-64, 0))
		}
		sh.w += nb
	}
	copy(sh.table, []uint64{uint64(n), uint64(lim), uint64(pay), uint64(sh.words), uint64(sh.nv), uint64(sh.w)})
	return sh
}

func u8s(p *C.uint8_t, n int) []byte {
	if p == nil {
		status.Fail(status.Argument, "null byte buffer")
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(p)), n)
}

// need checks that a caller's buffer holds exactly `want` elements.
func need(what string, got int64, want int64) {
	if got != want {
		status.Fail(status.Argument, "DCF %s: buffer holds %d elements, expected %d", what, got, want)
	}
}

func checkCount(count int64) int {
	if count < 1 || count > dcfMaxCount {
		status.Fail(status.Argument, "DCF batch of %d keys", count)
	}
	return int(count)
}

func useAESNI(impl int) C.int {
	if impl == mmoImplGo || !aesniAvailable() {
		return 0
	}
	return 1
}

func checkImpl(impl int) {
	if impl < 0 || impl > mmoImplAESNI {
		status.Fail(status.Argument, "unknown MMO implementation %d", impl)
	}
	if impl == mmoImplAESNI && !aesniAvailable() {
		status.Fail(status.Argument, "the AES-NI implementation is not available here")
	}
}

func checkBelow(vals []uint64, n int, what string) {
	if n < 64 {
		for _, v := range vals {
			if v>>uint(n) != 0 {
				status.Fail(status.Argument, "DCF %s must be < 2^%d", what, n)
			}
		}
	}
}

func p64(s []uint64) *C.uint64_t { return (*C.uint64_t)(unsafe.Pointer(&s[0])) }
func p8(s []byte) *C.uint8_t     { return (*C.uint8_t)(unsafe.Pointer(&s[0])) }

// fss_dcf_eval: party `party`'s shares of f^<(x) for B keys, perKey points per key
// (x: (B, perKey) uint64, out: (B, perKey, P, L) uint64); impl as for fss_mmo_hash.
//
//export fss_dcf_eval
func fss_dcf_eval(n, outBits, pay C.int, entryBits *C.int32_t, nbits C.int64_t, party C.int,
	count, perKey C.int64_t,
	seed *C.uint64_t, seedLen C.int64_t, scw *C.uint64_t, scwLen C.int64_t,
	tcw *C.uint8_t, tcwLen C.int64_t, vcw *C.uint8_t, vcwLen C.int64_t,
	final *C.uint64_t, finalLen C.int64_t, x *C.uint64_t, xLen C.int64_t,
	out *C.uint64_t, outLen C.int64_t, threads, impl C.int,
	errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	mmoInit()
	checkImpl(int(impl))
	sh := newDCFShape(int(n), int(outBits), int(pay), entryBits, int64(nbits))
	if party != 0 && party != 1 {
		status.Fail(status.Argument, "DCF key party must be 0 or 1, got %d", party)
	}
	B := checkCount(int64(count))
	if perKey < 1 || int64(perKey) > dcfMaxCount/int64(B) {
		status.Fail(status.Argument, "DCF eval: %d points per key", perKey)
	}
	M := int(perKey)
	b64, n64, w64, words := int64(B), int64(sh.n), int64(sh.w), int64(sh.words)
	need("seed", int64(seedLen), 2*b64)
	need("s_cw", int64(scwLen), n64*b64*2)
	need("t_cw", int64(tcwLen), int64(sh.tb)*b64)
	need("v_cw", int64(vcwLen), n64*b64*w64)
	need("final", int64(finalLen), b64*words)
	need("points", int64(xLen), b64*int64(M))
	need("output", int64(outLen), b64*int64(M)*words)
	// Slices over the caller's buffers: their lengths are the checked ones.
	seedS, scwS, finalS := u64s(seed, 2*B), u64s(scw, sh.n*B*2), u64s(final, B*sh.words)
	tcwS, vcwS := u8s(tcw, sh.tb*B), u8s(vcw, sh.n*B*sh.w)
	xS, outS := u64s(x, B*M), u64s(out, B*M*sh.words)
	checkBelow(xS, sh.n, "points")
	aes := useAESNI(int(impl))
	total := B * M
	nch := (total + dcfEvalChunk - 1) / dcfEvalChunk
	parallelChunks(nch, int(threads), func(c int) {
		j0 := c * dcfEvalChunk
		cnt := min(dcfEvalChunk, total-j0)
		scratch := make([]uint64, cnt*(2*(1+sh.nv)+4+sh.words))
		C.fss_dcf_eval_chunk(p64(sh.table), C.int(party), C.int64_t(B), C.int64_t(M), C.int64_t(j0),
			C.int64_t(cnt), p64(seedS), p64(scwS), p8(tcwS), p8(vcwS), p64(finalS), p64(xS), p64(outS),
			p64(scratch), aes)
		runtime.KeepAlive(scratch)
	})
	runtime.KeepAlive(sh)
	return status.OK
}

// fss_dcf_gen: both parties' keys for f^<_{alpha[b], beta[b]}, b < count
// [BCG+21 Fig. 1, Gen^<]. Inputs alpha (B,), beta (B, P, L) (reduced here per entry), the
// parties' root seeds (B, 2) (drawn in Python from the injected PRG, lowest bit clear);
// outputs s_cw, t_cw, v_cw (shared by both keys) and final (B, P, L).
//
//export fss_dcf_gen
func fss_dcf_gen(n, outBits, pay C.int, entryBits *C.int32_t, nbits C.int64_t, count C.int64_t,
	alpha *C.uint64_t, alphaLen C.int64_t, beta *C.uint64_t, betaLen C.int64_t,
	root0 *C.uint64_t, root0Len C.int64_t, root1 *C.uint64_t, root1Len C.int64_t,
	scw *C.uint64_t, scwLen C.int64_t, tcw *C.uint8_t, tcwLen C.int64_t,
	vcw *C.uint8_t, vcwLen C.int64_t, final *C.uint64_t, finalLen C.int64_t,
	threads, impl C.int, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	mmoInit()
	checkImpl(int(impl))
	sh := newDCFShape(int(n), int(outBits), int(pay), entryBits, int64(nbits))
	B := checkCount(int64(count))
	b64, n64, words := int64(B), int64(sh.n), int64(sh.words)
	need("alpha", int64(alphaLen), b64)
	need("beta", int64(betaLen), b64*words)
	need("root seed 0", int64(root0Len), 2*b64)
	need("root seed 1", int64(root1Len), 2*b64)
	need("s_cw", int64(scwLen), n64*b64*2)
	need("t_cw", int64(tcwLen), int64(sh.tb)*b64)
	need("v_cw", int64(vcwLen), n64*b64*int64(sh.w))
	need("final", int64(finalLen), b64*words)
	alphaS, r0, r1 := u64s(alpha, B), u64s(root0, 2*B), u64s(root1, 2*B)
	scwS, finalS := u64s(scw, sh.n*B*2), u64s(final, B*sh.words)
	tcwS, vcwS := u8s(tcw, sh.tb*B), u8s(vcw, sh.n*B*sh.w)
	checkBelow(alphaS, sh.n, "alpha")
	// Reduced copy of beta (the caller's buffer is only read).
	src := u64s(beta, B*sh.words)
	betaS := make([]uint64, len(src))
	for k := range src {
		e := shHdr + eStride*((k%sh.words)/sh.lim)
		betaS[k] = src[k] & sh.table[e+eMask0+k%sh.lim]
	}
	aes := useAESNI(int(impl))
	nch := (B + dcfGenChunk - 1) / dcfGenChunk
	parallelChunks(nch, int(threads), func(c int) {
		k0 := c * dcfGenChunk
		cnt := min(dcfGenChunk, B-k0)
		scratch := make([]uint64, cnt*(4*(2+2*sh.nv)+6+sh.words))
		C.fss_dcf_gen_chunk(p64(sh.table), C.int64_t(B), C.int64_t(k0), C.int64_t(cnt), p64(alphaS),
			p64(betaS), p64(r0), p64(r1), p64(scwS), p8(tcwS), p8(vcwS), p64(finalS), p64(scratch), aes)
		runtime.KeepAlive(scratch)
	})
	runtime.KeepAlive(sh)
	runtime.KeepAlive(betaS)
	return status.OK
}
