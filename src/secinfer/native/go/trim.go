package main

/*
#include <stdint.h>
#include <stdlib.h>
*/
import "C"

import "secinfer/native/he"

// Exports of trimmed ciphertexts and packed raw polynomials (he/wire.go).

// he_ct_trim: he.Trim for `count` positions.
//
//export he_ct_trim
func he_ct_trim(ph C.uint64_t, cth C.uint64_t, pos *C.int64_t, count C.int, out **C.uchar, outlen *C.size_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	ct := getCT(ph, cth)
	outBytes(he.Trim(params(ph).P, ct.v, i64s(pos, max(int(count), 0))), out, outlen)
	return codeOK
}

// he_trim_len writes he.TrimLen.
//
//export he_trim_len
func he_trim_len(ph C.uint64_t, level C.int, count C.int, out *C.size_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	if level < 0 || int(level) > P.MaxLevel() || count < 1 {
		fail(codeArgument, "level %d or count %d out of range", level, count)
	}
	*out = C.size_t(he.TrimLen(P, int(level), int(count)))
	return codeOK
}

// he_decrypt_trimmed: he.DecryptTrimmed, out[l*count + i] = m_{pos[i]} mod q_l.
//
//export he_decrypt_trimmed
func he_decrypt_trimmed(ph C.uint64_t, skh C.uint64_t, data *C.uchar, n C.size_t, level C.int, pos *C.int64_t, count C.int, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	sk := getSK(ph, skh)
	he.CheckLevel(P, int(level), codeArgument)
	idx := he.Positions(P, i64s(pos, max(int(count), 0)))
	lv := int(level)
	he.DecryptTrimmed(P, sk.v, inBytes(data, n), lv, idx, u64s(out, (lv+1)*len(idx)))
	return codeOK
}

// he_poly_pack packs (level + 1) x N residues; each must be below its prime.
//
//export he_poly_pack
func he_poly_pack(ph C.uint64_t, level C.int, in *C.uint64_t, out **C.uchar, outlen *C.size_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	he.CheckLevel(P, int(level), codeArgument)
	outBytes(he.PackPoly(P, int(level), u64s(in, (int(level)+1)*P.N())), out, outlen)
	return codeOK
}

// he_poly_unpack reads a packed polynomial at `level` into out ((level + 1) x N).
//
//export he_poly_unpack
func he_poly_unpack(ph C.uint64_t, level C.int, data *C.uchar, n C.size_t, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	he.CheckLevel(P, int(level), codeArgument)
	he.UnpackPoly(P, int(level), inBytes(data, n), u64s(out, (int(level)+1)*P.N()))
	return codeOK
}
