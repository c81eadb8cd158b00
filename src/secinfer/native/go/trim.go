package main

/*
#include <stdint.h>
#include <stdlib.h>
*/
import "C"

import (
	"github.com/tuneinsight/lattigo/v6/ring"
)

// Trimmed ciphertexts: what a key owner needs to read chosen coefficients of the
// decryption m = c0 + c1 s of a degree-1 ciphertext. Coefficient j of m depends on
// coefficient j of c0 and on all of c1, so the frame holds
//
//	c0 at the positions, coefficient domain: for each level l, count residues mod q_l
//	c1 in full, NTT domain (as Lattigo stores it): for each level l, N residues mod q_l
//
// every row packed at its prime's bit width as in serial_format.go (writePolys). No
// header: the level and the positions are known to both sides, so the exact length is
// too (trimLen), and the reader refuses any other length, unreduced residues and
// non-zero padding bits.

func trimRefs(P ckksParams, c0 ring.Poly, c1 ring.Poly) []polyRef {
	moduli := P.Q()[:c1.Level()+1]
	return []polyRef{{c0, moduli}, {c1, moduli}}
}

func trimLen(P ckksParams, level, count int) int {
	n := 0
	for _, q := range P.Q()[:level+1] {
		n += rowBytes(count, q) + rowBytes(P.N(), q)
	}
	return n
}

func positions(P ckksParams, pos *C.int64_t, count C.int) []int {
	if count < 1 || int(count) > 2*P.N() {
		fail(codeArgument, "between 1 and 2N positions, got %d", count)
	}
	out := make([]int, int(count))
	for i, p := range i64s(pos, int(count)) {
		if p < 0 || p >= int64(P.N()) {
			fail(codeArgument, "position %d outside [0, N)", p)
		}
		out[i] = int(p)
	}
	return out
}

// he_ct_trim serialises a degree-1 NTT ciphertext as a trimmed frame for `count`
// positions (coefficients of c0 taken out of the NTT domain).
//
//export he_ct_trim
func he_ct_trim(ph C.uint64_t, cth C.uint64_t, pos *C.int64_t, count C.int, out **C.uchar, outlen *C.size_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	ct := getCT(ph, cth)
	if ct.v.Degree() != 1 || !ct.v.IsNTT {
		fail(codeArgument, "trimming needs a degree-1 ciphertext in the NTT domain")
	}
	idx := positions(P, pos, count)
	level := ct.v.Level()
	r := P.RingQ().AtLevel(level)
	c0 := r.NewPoly()
	r.INTT(ct.v.Value[0], c0)
	sel := ring.NewPoly(len(idx), level)
	for l := range sel.Coeffs {
		row := c0.Coeffs[l]
		for i, j := range idx {
			sel.Coeffs[l][i] = row[j]
		}
	}
	b := make([]byte, 0, trimLen(P, level, len(idx)))
	b = writePolys(b, trimRefs(P, sel, ct.v.Value[1]))
	outBytes(b, out, outlen)
	return codeOK
}

// he_trim_len writes the exact byte length of a trimmed frame at `level` for `count`
// positions.
//
//export he_trim_len
func he_trim_len(ph C.uint64_t, level C.int, count C.int, out *C.size_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	if level < 0 || int(level) > P.MaxLevel() || count < 1 {
		fail(codeArgument, "level %d or count %d out of range", level, count)
	}
	*out = C.size_t(trimLen(P, int(level), int(count)))
	return codeOK
}

// he_decrypt_trimmed reads a trimmed frame at `level` and writes the coefficient-domain
// residues of m = c0 + c1 s at the positions: out[l*count + i] = m_{pos[i]} mod q_l.
//
//export he_decrypt_trimmed
func he_decrypt_trimmed(ph C.uint64_t, skh C.uint64_t, data *C.uchar, n C.size_t, level C.int, pos *C.int64_t, count C.int, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	sk := getSK(ph, skh)
	if level < 0 || int(level) > P.MaxLevel() {
		fail(codeArgument, "level %d out of range", level)
	}
	idx := positions(P, pos, count)
	lv := int(level)
	b := inBytes(data, n)
	if want := trimLen(P, lv, len(idx)); len(b) != want {
		fail(codeSerial, "trimmed ciphertext: %d bytes, the level and positions imply %d", len(b), want)
	}
	r := P.RingQ().AtLevel(lv)
	sel := ring.NewPoly(len(idx), lv)
	c1 := r.NewPoly()
	readPolys(b, trimRefs(P, sel, c1), "trimmed ciphertext")
	// c1 s in the NTT domain (the secret key is kept in NTT and Montgomery form), then
	// back to coefficients; only the positions are used.
	r.MulCoeffsMontgomery(c1, sk.v.Value.Q, c1)
	r.INTT(c1, c1)
	dst := u64s(out, (lv+1)*len(idx))
	for l, q := range P.Q()[:lv+1] {
		row := c1.Coeffs[l]
		for i, j := range idx {
			v := row[j] + sel.Coeffs[l][i] // both < q < 2^61: no overflow
			if v >= q {
				v -= q
			}
			dst[l*len(idx)+i] = v
		}
	}
	return codeOK
}

// Raw residue polynomials (e.g. crisp's pk0, sent as coefficient residues): one polynomial
// of N coefficients at `level`, every row packed at its prime's width (writePolys), no
// header; the reader knows the level, so the exact length.

func rawPoly(P ckksParams, level C.int, in []uint64) ring.Poly {
	N := P.N()
	rows := make([][]uint64, int(level)+1)
	for l := range rows {
		rows[l] = in[l*N : (l+1)*N]
	}
	return ring.Poly{Coeffs: rows}
}

// he_poly_pack packs (level + 1) x N residues; each must be below its prime.
//
//export he_poly_pack
func he_poly_pack(ph C.uint64_t, level C.int, in *C.uint64_t, out **C.uchar, outlen *C.size_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	if level < 0 || int(level) > P.MaxLevel() {
		fail(codeArgument, "level %d out of range", level)
	}
	p := rawPoly(P, level, u64s(in, (int(level)+1)*P.N()))
	moduli := P.Q()[:int(level)+1]
	for l, row := range p.Coeffs {
		for _, c := range row {
			if c >= moduli[l] {
				fail(codeArgument, "residue not reduced modulo prime %d", l)
			}
		}
	}
	refs := []polyRef{{p, moduli}}
	outBytes(writePolys(make([]byte, 0, polysSize(refs)), refs), out, outlen)
	return codeOK
}

// he_poly_unpack reads a packed polynomial at `level` into out ((level + 1) x N):
// HESerializationError for any other length, an unreduced residue or non-zero padding.
//
//export he_poly_unpack
func he_poly_unpack(ph C.uint64_t, level C.int, data *C.uchar, n C.size_t, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	if level < 0 || int(level) > P.MaxLevel() {
		fail(codeArgument, "level %d out of range", level)
	}
	p := rawPoly(P, level, u64s(out, (int(level)+1)*P.N()))
	refs := []polyRef{{p, P.Q()[:int(level)+1]}}
	b := inBytes(data, n)
	exactLen(b, refs, "packed polynomial")
	readPolys(b, refs, "packed polynomial")
	return codeOK
}
