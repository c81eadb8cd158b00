package main

/*
#include <stdint.h>
#include <stdlib.h>
*/
import "C"

import (
	"math/big"
	"unsafe"

	"github.com/tuneinsight/lattigo/v6/core/rlwe"
	"github.com/tuneinsight/lattigo/v6/ring"

	"secinfer/native/he"
	"secinfer/native/popk"
)

// Exports of crisp's zero-knowledge maps (package popk): the proof of plaintext knowledge
// (secinfer.crypto.zk.popk) and the proof that a public key with a verifier-chosen uniform
// part is well formed (secinfer.crypto.zk.keyproof). Arguments cross as signed multi-limb
// integer vectors: component x is L_x rows of N int64 limbs, x_j = sum_l limb[l][j] 2^(40 l).

// popkDelta reads Delta, a positive integer of dlen little-endian bytes (at most 256).
func popkDelta(delta *C.uchar, dlen C.int) (*big.Int, []byte) {
	if dlen < 1 || dlen > 256 {
		fail(codeArgument, "Delta must have 1..256 bytes, got %d", dlen)
	}
	le := inBytes(delta, C.size_t(dlen))
	return popk.ParseDelta(le), le
}

// limbCounts reads the limb count of each component: 1..8, or 0 for the components from
// index optional on (e0, e1 may be absent in rounded proofs).
func limbCounts(limbs *C.int64_t, ls []int, optional int) {
	for i, v := range i64s(limbs, len(ls)) {
		if (v < 1 && i < optional) || v < 0 || v > 8 {
			fail(codeArgument, "component %d: limb count %d not in 1..8", i, v)
		}
		ls[i] = int(v)
	}
}

func popkArgs(ph, pkh C.uint64_t, level C.int, limbs *C.int64_t) (*ring.Ring, *PK, [4]int, int) {
	P := params(ph).P
	pk := getPK(ph, pkh)
	he.CheckLevel(P, int(level), codeArgument)
	var ls [4]int
	limbCounts(limbs, ls[:], 2)
	return P.RingQ().AtLevel(int(level)), pk, ls, P.N()
}

// he_popk_hash writes popk.Hash into out (32 bytes): the prover passes nct = 0 and its
// masks, the verifier the responses, the client's ciphertexts and the challenge (rows x
// nct entries in 0..4); roundPrime >= 1 rounds both components (low, if not null, receives
// the rows x 2 x N low residues), roundPrime < 0: exact.
//
//export he_popk_hash
func he_popk_hash(ph, pkh C.uint64_t, level C.int, delta *C.uchar, dlen C.int, limbs *C.int64_t, rows C.int, z *C.int64_t, nct C.int, cts *C.uint64_t, chal *C.uchar, roundPrime C.int, low *C.uint64_t, out *C.uchar, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	r, pk, ls, N := popkArgs(ph, pkh, level, limbs)
	dv, dle := popkDelta(delta, dlen)
	per := (ls[0] + ls[1] + ls[2] + ls[3]) * N
	if rows < 1 || nct < 0 {
		fail(codeArgument, "rows must be >= 1 and nct >= 0")
	}
	rp := int(roundPrime)
	if rp == 0 || rp > int(level) {
		fail(codeArgument, "round prime %d: must be in 1..level (or negative: exact)", rp)
	}
	var lows []uint64
	if rp > 0 && low != nil {
		lows = u64s(low, int(rows)*2*N)
	}
	zs := i64s(z, int(rows)*per)
	var hs []uint64
	var ch []byte
	if nct > 0 {
		hs = u64s(cts, int(nct))
		ch = inBytes((*C.uchar)(chal), C.size_t(int(rows)*int(nct)))
	}
	ctv := make([]*rlwe.Ciphertext, len(hs))
	for j, h := range hs {
		ct := getCT(ph, C.uint64_t(h))
		if ct.v.Degree() != 1 || ct.v.Level() != int(level) || !ct.v.IsNTT {
			fail(codeArgument, "ciphertext %d: need degree 1, level %d, NTT domain", j, level)
		}
		ctv[j] = ct.v
	}
	sum := popk.Hash(r, pk.v, dv, dle, ls, int(rows), zs, ctv, ch, rp, lows)
	copy(unsafe.Slice((*byte)(unsafe.Pointer(out)), 32), sum)
	return codeOK
}

// he_popk_image writes f(z) for one argument as residues out[c][l][j] (tests).
//
//export he_popk_image
func he_popk_image(ph, pkh C.uint64_t, level C.int, delta *C.uchar, dlen C.int, limbs *C.int64_t, z *C.int64_t, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	r, pk, ls, N := popkArgs(ph, pkh, level, limbs)
	dv, _ := popkDelta(delta, dlen)
	zs := i64s(z, (ls[0]+ls[1]+ls[2]+ls[3])*N)
	c0, c1 := popk.Image(r, pk.v, dv, ls, zs, N, nil, nil, ring.Poly{}, nil)
	popk.ResiduesInto(r, u64s(out, 2*(r.Level()+1)*N), c0, c1)
	return codeOK
}

// he_encode_limbs: popk.EncodeLimbs with Delta = 2^logScale when dlen = 0, else the
// integer of dlen little-endian bytes at delta (e.g. crisp's ~300-bit mask plaintexts).
//
//export he_encode_limbs
func he_encode_limbs(ph C.uint64_t, level, logScale C.int, delta *C.uchar, dlen C.int, la C.int, a *C.int64_t, lb C.int, b *C.int64_t, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	he.CheckLevel(P, int(level), codeArgument)
	if logScale < 0 || logScale > 1000 || la < 1 || la > 8 || lb < 1 || lb > 8 {
		fail(codeArgument, "logScale must be 0..1000 and the limb counts 1..8")
	}
	var scale *big.Int
	if dlen != 0 {
		scale, _ = popkDelta(delta, dlen)
	}
	N := P.N()
	pt := popk.EncodeLimbs(P, int(level), int(logScale), scale, i64s(a, int(la)*N), int(la), i64s(b, int(lb)*N), int(lb))
	*out = C.uint64_t(put(&PT{ph: uint64(ph), v: pt}))
	return codeOK
}

// ---------------------------------------------------------------- key proof

// he_keygen_seeded: popk.SeededKeyPair for the a expanded from aseed (a Q-only key).
//
//export he_keygen_seeded
func he_keygen_seeded(ph C.uint64_t, aseed *C.uchar, aseedlen C.size_t, kseed *C.uchar, kseedlen C.size_t, sOut, eOut *C.int64_t, skOut, pkOut *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	a := popk.ExpandA(P, inBytes(aseed, aseedlen))
	N := P.N()
	sk, pk0 := popk.SeededKeyPair(P, a, inBytes(kseed, kseedlen), i64s(sOut, N), i64s(eOut, N))
	*skOut = C.uint64_t(put(&SK{uint64(ph), sk}))
	*pkOut = C.uint64_t(put(&PK{ph: uint64(ph), v: popk.QOnlyKey(P, pk0, a), qOnly: true}))
	return codeOK
}

// he_pk_from_parts: the verifier's copy of the key, from its seed of a and pk0's residues.
//
//export he_pk_from_parts
func he_pk_from_parts(ph C.uint64_t, aseed *C.uchar, aseedlen C.size_t, pk0 *C.uint64_t, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	a := popk.ExpandA(P, inBytes(aseed, aseedlen))
	p := popk.PK0FromResidues(P, u64s(pk0, P.QCount()*P.N()))
	*out = C.uint64_t(put(&PK{ph: uint64(ph), v: popk.QOnlyKey(P, p, a), qOnly: true}))
	return codeOK
}

func keyArgs(ph, pkh C.uint64_t, limbs *C.int64_t) (*ring.Ring, *PK, [2]int, int) {
	P := params(ph).P
	pk := getPK(ph, pkh)
	var ls [2]int
	limbCounts(limbs, ls[:], 2)
	return P.RingQ(), pk, ls, P.N()
}

// he_keyproof_hash writes popk.KeyHash into out (32 bytes): target = 0 for the prover's
// masks, 1 for the verifier (responses and challenge bits).
//
//export he_keyproof_hash
func he_keyproof_hash(ph, pkh C.uint64_t, limbs *C.int64_t, rows C.int, z *C.int64_t, target C.int, chal *C.uchar, out *C.uchar, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	r, pk, ls, N := keyArgs(ph, pkh, limbs)
	if rows < 1 {
		fail(codeArgument, "rows must be >= 1")
	}
	zs := i64s(z, int(rows)*(ls[0]+ls[1])*N)
	var ch []byte
	if target != 0 {
		ch = inBytes(chal, C.size_t(rows))
	}
	sum := popk.KeyHash(r, pk.v, ls, int(rows), zs, ch)
	copy(unsafe.Slice((*byte)(unsafe.Pointer(out)), 32), sum)
	return codeOK
}

// he_keyproof_image writes F(z) for one argument as residues (tests).
//
//export he_keyproof_image
func he_keyproof_image(ph, pkh C.uint64_t, limbs *C.int64_t, z *C.int64_t, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	r, pk, ls, N := keyArgs(ph, pkh, limbs)
	im := popk.KeyImage(r, pk.v, ls, i64s(z, (ls[0]+ls[1])*N), N)
	r.INTT(im, im)
	popk.ResiduesInto(r, u64s(out, (r.Level()+1)*N), im)
	return codeOK
}
