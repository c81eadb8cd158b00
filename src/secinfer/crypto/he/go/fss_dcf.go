package main

/*
#include <stdint.h>
*/
import "C"

import (
	"encoding/binary"
	"math/bits"
	"unsafe"
)

// Native kernels of the distributed comparison function of secinfer/crypto/fss/dcf.py
// [BCG+21 Fig. 1]: key generation and batched evaluation, byte for byte the keys and
// outputs of the numpy implementation (which stays the reference; the tests compare the
// two on random and boundary inputs).
//
// Layout (all as numpy stores it, for B keys of one DCFParams):
//
//	seed  (B, 2) uint64          s_cw (n, B, 2) uint64     t_cw (ceil(2n/8), B) uint8
//	v_cw  (n, B, W) uint8        final (B, P, L) uint64
//
// Level i of every key is one contiguous block (level-major). A payload vector has P
// entries of L limbs (L = 1 for k <= 64, else 2); as words, limb l of entry p is word
// p L + l, which is also how the value words of a hash output are read: the first P L
// words of the nv = ceil(P L / 2) value blocks. In v_cw entry p takes ceil(k_p / 8)
// little-endian bytes. Group sums are taken mod 2^(64 L) per entry and reduced mod 2^k_p
// once at the end, as in the numpy code (the reduction commutes with + and -).
//
// Hash tweaks (DCFParams.eval_tweak_table / gen_tweak_table / convert_tweaks): the seed
// of child c uses tweak c, its values 2 + c nv + q (q < nv), the leaf conversion
// 2 + 2 nv + q.
//
// The secret-dependent choices (the control bits t, the bits of alpha) are applied with
// masks, not branches. Work is split over goroutines by contiguous chunks of keys
// (evaluation: of points); each chunk writes only its own keys' outputs, so the result is
// the same for every schedule and thread count.

const (
	dcfEvalChunk = 128 // points per work item
	dcfGenChunk  = 64  // keys per work item
	dcfMaxCount  = 1 << 40
	dcfMaxWords  = 1 << 12
)

type dcfShape struct {
	n, lim, pay, words, nv, tb, w int
	ebytes, eoff                  []int
	mask                          []uint64 // (P, L) limb masks: entry p reduced mod 2^k_p
	loMask, hiMask                []uint64 // per entry: the bytes of its packed form
}

func newDCFShape(n, outBits, pay int, bitsPtr *C.int32_t, nbits int64) *dcfShape {
	if n < 1 || n > 64 {
		fail(codeArgument, "DCF domain bits must be in 1..64, got %d", n)
	}
	if outBits < 1 || outBits > 128 {
		fail(codeArgument, "DCF output group Z_2^k needs 1 <= k <= 128, got %d", outBits)
	}
	lim := 1
	if outBits > 64 {
		lim = 2
	}
	if pay < 1 || pay*lim > dcfMaxWords || nbits != int64(pay) {
		fail(codeArgument, "DCF payload of %d entries with %d bit widths", pay, nbits)
	}
	if bitsPtr == nil {
		fail(codeArgument, "null entry-width buffer")
	}
	eb := unsafe.Slice((*int32)(unsafe.Pointer(bitsPtr)), pay)
	sh := &dcfShape{n: n, lim: lim, pay: pay, words: pay * lim, nv: (pay*lim + 1) / 2, tb: (2*n + 7) / 8,
		ebytes: make([]int, pay), eoff: make([]int, pay), mask: make([]uint64, pay*lim),
		loMask: make([]uint64, pay), hiMask: make([]uint64, pay)}
	for p := 0; p < pay; p++ {
		b := int(eb[p])
		if b < 1 || b > outBits {
			fail(codeArgument, "DCF payload entry %d has %d bits, outside 1..%d", p, b, outBits)
		}
		sh.eoff[p] = sh.w
		sh.ebytes[p] = (b + 7) / 8
		sh.w += sh.ebytes[p]
		sh.loMask[p], sh.hiMask[p] = byteMask(sh.ebytes[p]), byteMask(sh.ebytes[p]-8)
		for l := 0; l < lim; l++ {
			width := min(max(b-64*l, 0), 64)
			if width == 64 {
				sh.mask[p*lim+l] = ^uint64(0)
			} else {
				sh.mask[p*lim+l] = (uint64(1) << width) - 1
			}
		}
	}
	return sh
}

func u8s(p *C.uint8_t, n int) []byte {
	if p == nil {
		fail(codeArgument, "null byte buffer")
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(p)), n)
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

// need checks that a caller's buffer holds exactly `want` elements.
func need(what string, got int64, want int64) {
	if got != want {
		fail(codeArgument, "DCF %s: buffer holds %d elements, expected %d", what, got, want)
	}
}

func checkCount(count int64) int {
	if count < 1 || count > dcfMaxCount {
		fail(codeArgument, "DCF batch of %d keys", count)
	}
	return int(count)
}

// ---------------------------------------------------------------- group words

// addInto: acc += v (entry-wise mod 2^(64 L)).
func addInto(acc, v []uint64, lim int) {
	if lim == 1 {
		for i := range acc {
			acc[i] += v[i]
		}
		return
	}
	for i := 0; i+1 < len(acc); i += 2 {
		var c uint64
		acc[i], c = bits.Add64(acc[i], v[i], 0)
		acc[i+1] += v[i+1] + c
	}
}

// condNegReduce writes (-1)^bit a reduced per entry (m = 0 or all ones for bit = 1).
func condNegReduce(dst, a []uint64, m uint64, sh *dcfShape) {
	one := m & 1
	if sh.lim == 1 {
		for i := range dst {
			dst[i] = ((a[i] ^ m) + one) & sh.mask[i]
		}
		return
	}
	for i := 0; i+1 < len(dst); i += 2 {
		lo, c := bits.Add64(a[i]^m, one, 0)
		dst[i] = lo & sh.mask[i]
		dst[i+1] = ((a[i+1] ^ m) + c) & sh.mask[i+1]
	}
}

// loadEntry reads a packed entry of nb bytes (1..16) as two little-endian limbs.
func loadEntry(b []byte, nb int) (lo, hi uint64) {
	switch {
	case nb == 8:
		return binary.LittleEndian.Uint64(b), 0
	case nb == 16:
		return binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])
	case nb > 8:
		lo = binary.LittleEndian.Uint64(b)
		for k := nb - 1; k >= 8; k-- {
			hi = hi<<8 | uint64(b[k])
		}
		return lo, hi
	}
	for k := nb - 1; k >= 0; k-- {
		lo = lo<<8 | uint64(b[k])
	}
	return lo, 0
}

// storeEntries writes the P entries of v (reduced) packed into row (one key's W bytes).
// An entry with 16 bytes of the row from its start is written as two whole words: the
// bytes past it belong to later entries of the row, which are written afterwards.
func storeEntries(row []byte, v []uint64, sh *dcfShape) {
	for p := 0; p < sh.pay; p++ {
		lo, hi := v[p*sh.lim], uint64(0)
		if sh.lim == 2 {
			hi = v[2*p+1]
		}
		at, nb := sh.eoff[p], sh.ebytes[p]
		if at+16 <= len(row) {
			binary.LittleEndian.PutUint64(row[at:], lo)
			binary.LittleEndian.PutUint64(row[at+8:], hi)
			continue
		}
		b := row[at : at+nb]
		for k := 0; k < nb && k < 8; k++ {
			b[k] = byte(lo >> (8 * k))
		}
		for k := 8; k < nb; k++ {
			b[k] = byte(hi >> (8 * (k - 8)))
		}
	}
}

// addPackedMasked: acc += m & unpack(row), row = lv[off : off+W], one key's packed
// correction word in the level block lv. Where 16 bytes can be read from an entry's start
// without leaving lv, the entry is read as two whole words and masked to its width (the
// bytes past it belong to later entries or keys and are only read).
func addPackedMasked(acc []uint64, lv []byte, off int, m uint64, sh *dcfShape) {
	for p := 0; p < sh.pay; p++ {
		at := off + sh.eoff[p]
		var lo, hi uint64
		if at+16 <= len(lv) {
			lo = binary.LittleEndian.Uint64(lv[at:]) & sh.loMask[p]
			hi = binary.LittleEndian.Uint64(lv[at+8:]) & sh.hiMask[p]
		} else {
			lo, hi = loadEntry(lv[at:], sh.ebytes[p])
		}
		lo &= m
		if sh.lim == 1 {
			acc[p] += lo
			continue
		}
		var c uint64
		acc[2*p], c = bits.Add64(acc[2*p], lo, 0)
		acc[2*p+1] += (hi & m) + c
	}
}

// ---------------------------------------------------------------- evaluation

type dcfEvalArgs struct {
	sh                 *dcfShape
	party, count, perK int
	seed, scw, final   []uint64
	tcw, vcw           []byte
	x, out             []uint64
	impl               int
}

func (a *dcfEvalArgs) chunk(j0, j1 int) {
	sh, B := a.sh, a.count
	n, nv, words, w := sh.n, sh.nv, sh.words, sh.w
	cnt := j1 - j0
	tw := 1 + nv
	hb := make([]uint64, cnt*tw*2)
	s := make([]uint64, 2*cnt)
	t := make([]uint64, cnt)
	acc := make([]uint64, cnt*words)
	kbs := make([]int, cnt) // key of each point
	for j := 0; j < cnt; j++ {
		kb := (j0 + j) / a.perK
		kbs[j] = kb
		s[2*j], s[2*j+1] = a.seed[2*kb], a.seed[2*kb+1]
		t[j] = uint64(a.party)
	}
	for i := 0; i < n; i++ {
		shift := uint(n - 1 - i)
		for j := 0; j < cnt; j++ {
			side := (a.x[j0+j] >> shift) & 1
			h := hb[j*tw*2 : (j+1)*tw*2]
			s0, s1 := s[2*j], s[2*j+1]
			h[0], h[1] = s0^side, s1
			vt := 2 + side*uint64(nv)
			for q := 0; q < nv; q++ {
				h[2+2*q], h[3+2*q] = s0^(vt+uint64(q)), s1
			}
		}
		mmoHashInPlace(hb, a.impl)
		tshift := uint(2 * (i % 4))
		lvS := a.scw[i*B*2 : (i+1)*B*2]
		lvT := a.tcw[(i/4)*B : (i/4+1)*B]
		lvV := a.vcw[i*B*w : (i+1)*B*w]
		for j := 0; j < cnt; j++ {
			kb := kbs[j]
			h := hb[j*tw*2 : (j+1)*tw*2]
			ac := acc[j*words : (j+1)*words]
			m := -t[j]
			addInto(ac, h[2:2+words], sh.lim)
			addPackedMasked(ac, lvV, kb*w, m, sh)
			side := (a.x[j0+j] >> shift) & 1
			tc := uint64(lvT[kb]>>(tshift+uint(side))) & 1
			c0, c1 := h[0], h[1]
			s[2*j] = (c0 &^ 1) ^ (lvS[2*kb] & m)
			s[2*j+1] = c1 ^ (lvS[2*kb+1] & m)
			t[j] = (c0 & 1) ^ (t[j] & tc)
		}
	}
	// Leaf: Convert(s) + t * final, negated for party 1, reduced per entry.
	hc := hb[:cnt*nv*2]
	for j := 0; j < cnt; j++ {
		s0, s1 := s[2*j], s[2*j+1]
		for q := 0; q < nv; q++ {
			hc[2*(j*nv+q)], hc[2*(j*nv+q)+1] = s0^uint64(2+2*nv+q), s1
		}
	}
	mmoHashInPlace(hc, a.impl)
	fm := make([]uint64, words)
	neg := uint64(0)
	if a.party == 1 {
		neg = ^uint64(0)
	}
	for j := 0; j < cnt; j++ {
		kb := kbs[j]
		ac := acc[j*words : (j+1)*words]
		addInto(ac, hc[j*nv*2:j*nv*2+words], sh.lim)
		m := -t[j]
		for k := 0; k < words; k++ {
			fm[k] = a.final[kb*words+k] & m
		}
		addInto(ac, fm, sh.lim)
		condNegReduce(a.out[(j0+j)*words:(j0+j+1)*words], ac, neg, sh)
	}
}

// fss_dcf_eval: party `party`'s shares of f^<(x) for B keys, perKey points per key
// (x: (B, perKey) uint64, out: (B, perKey, P, L) uint64).
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
	sh := newDCFShape(int(n), int(outBits), int(pay), entryBits, int64(nbits))
	if party != 0 && party != 1 {
		fail(codeArgument, "DCF key party must be 0 or 1, got %d", party)
	}
	B := checkCount(int64(count))
	if perKey < 1 || int64(perKey) > dcfMaxCount/int64(B) {
		fail(codeArgument, "DCF eval: %d points per key", perKey)
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
	a := &dcfEvalArgs{sh: sh, party: int(party), count: B, perK: M,
		seed: u64s(seed, 2*B), scw: u64s(scw, sh.n*B*2), final: u64s(final, B*sh.words),
		tcw: u8s(tcw, sh.tb*B), vcw: u8s(vcw, sh.n*B*sh.w),
		x: u64s(x, B*M), out: u64s(out, B*M*sh.words), impl: int(impl)}
	if sh.n < 64 {
		for _, v := range a.x {
			if v>>uint(sh.n) != 0 {
				fail(codeArgument, "DCF eval: points must be < 2^%d", sh.n)
			}
		}
	}
	total := B * M
	nch := (total + dcfEvalChunk - 1) / dcfEvalChunk
	parallelChunks(nch, int(threads), func(c int) {
		a.chunk(c*dcfEvalChunk, min((c+1)*dcfEvalChunk, total))
	})
	return codeOK
}
