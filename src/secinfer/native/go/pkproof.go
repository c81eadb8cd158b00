package main

/*
#include <stdint.h>
#include <stdlib.h>
*/
import "C"

import (
	"crypto/sha256"
	"encoding/binary"
	"unsafe"

	"github.com/tuneinsight/lattigo/v6/core/rlwe"
	"github.com/tuneinsight/lattigo/v6/ring"
	"github.com/tuneinsight/lattigo/v6/schemes/ckks"
	"github.com/tuneinsight/lattigo/v6/utils/sampling"
)

// A public key whose uniform part is chosen by the *other* party, and the linear map of
// the proof that the key is well formed (crisp, secinfer.crypto.zk.keyproof):
//
//	a    = expansion of a verifier-chosen seed: uniform in R_Q (all Q primes)
//	pk0  = e - a s   (s ternary, e Gaussian: the parameter set's Xs and Xe)
//	F(s, e) = e - a s,   statement: F(s, e) = pk0 with short (s, e)
//
// Only the Q part is defined (the P part is zero and the key is marked qOnly): such a key
// encrypts through he_encrypt_rand only, never through Lattigo's encryptor, whose
// special-prime rounding would also use the unproven P part.

const pkASeedTag = "secinfer/crisp-pk-a/v1"

// expandA returns the uniform a (NTT domain over all Q primes: a uniform NTT vector is a
// uniform polynomial) from a 16..32-byte seed.
func expandA(P ckks.Parameters, seed []byte) ring.Poly {
	if len(seed) < 16 || len(seed) > 32 {
		fail(codeArgument, "the seed of a must have 16..32 bytes, not %d", len(seed))
	}
	key := sha256.Sum256(append([]byte(pkASeedTag), seed...))
	prng, err := sampling.NewKeyedPRNG(key[:])
	check(err, codeHE, "prng")
	r := P.RingQ()
	a := r.NewPoly()
	ring.NewUniformSampler(prng, r).Read(a)
	return a
}

// qOnlyKey builds the public key (pk0, a) from NTT-domain standard-form polynomials.
func qOnlyKey(P ckks.Parameters, ph uint64, pk0, a ring.Poly) *PK {
	r := P.RingQ()
	pk := rlwe.NewPublicKey(P)
	r.MForm(pk0, pk.Value[0].Q)
	r.MForm(a, pk.Value[1].Q)
	return &PK{ph: ph, v: pk, qOnly: true}
}

// he_keygen_seeded: the client's key pair for the verifier's a: s ternary and e Gaussian
// sampled from a PRNG keyed with kseed (the caller's injected randomness), written out
// centred (the proof's witness); pk0 = e - a s over Q.
//
//export he_keygen_seeded
func he_keygen_seeded(ph C.uint64_t, aseed *C.uchar, aseedlen C.size_t, kseed *C.uchar, kseedlen C.size_t, sOut, eOut *C.int64_t, skOut, pkOut *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	a := expandA(P, inBytes(aseed, aseedlen))
	key := inBytes(kseed, kseedlen)
	if len(key) < 16 {
		fail(codeArgument, "key seed must have at least 16 bytes")
	}
	prng, err := sampling.NewKeyedPRNG(key)
	check(err, codeHE, "prng")
	N := P.N()
	ss, es := i64s(sOut, N), i64s(eOut, N)
	r0 := P.RingQ().AtLevel(0)
	q0 := P.Q()[0]
	for i, d := range []ring.DistributionParameters{P.Xs(), P.Xe()} {
		smp, err := ring.NewSampler(prng, r0, d, false)
		check(err, codeHE, "sampler")
		p := r0.NewPoly()
		smp.Read(p)
		dst := [][]int64{ss, es}[i]
		for j, c := range p.Coeffs[0] {
			if c > q0/2 {
				dst[j] = -int64(q0 - c)
			} else {
				dst[j] = int64(c)
			}
		}
	}
	r := P.RingQ()
	sQ, eQ := polyFromInts(r, ss), polyFromInts(r, es)
	r.NTT(sQ, sQ)
	r.NTT(eQ, eQ)
	pk0 := r.NewPoly()
	r.MulCoeffsBarrett(a, sQ, pk0)
	r.Sub(eQ, pk0, pk0)
	sk := rlwe.NewSecretKey(P)
	r.MForm(sQ, sk.Value.Q)
	if rp := P.RingP(); rp != nil {
		sP := polyFromInts(rp, ss)
		rp.NTT(sP, sP)
		rp.MForm(sP, sk.Value.P)
	}
	*skOut = C.uint64_t(put(&SK{uint64(ph), sk}))
	*pkOut = C.uint64_t(put(qOnlyKey(P, uint64(ph), pk0, a)))
	return codeOK
}

// he_pk_from_parts: the verifier's copy of the key, from its own seed of a and the
// received pk0 as coefficient-domain residues (QCount rows of N, each below its prime).
//
//export he_pk_from_parts
func he_pk_from_parts(ph C.uint64_t, aseed *C.uchar, aseedlen C.size_t, pk0 *C.uint64_t, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	a := expandA(P, inBytes(aseed, aseedlen))
	r := P.RingQ()
	N := P.N()
	src := u64s(pk0, P.QCount()*N)
	p := r.NewPoly()
	for l, q := range P.Q() {
		row := src[l*N : (l+1)*N]
		for j, c := range row {
			if c >= q {
				fail(codeArgument, "pk0 residue %d of prime %d is not reduced", j, l)
			}
		}
		copy(p.Coeffs[l], row)
	}
	r.NTT(p, p)
	*out = C.uint64_t(put(qOnlyKey(P, uint64(ph), p, a)))
	return codeOK
}

// keyImage returns F(s, e) = e - a s (NTT, standard form) for one argument z = (s, e)
// in the limb layout of popk.go (ls[0] limbs of s, then ls[1] limbs of e).
func keyImage(r *ring.Ring, pk *PK, ls [2]int, z []int64, N int) ring.Poly {
	s, e := r.NewPoly(), r.NewPoly()
	popkPoly(r, z[:ls[0]*N], ls[0], N, nil, false, s)
	popkPoly(r, z[ls[0]*N:(ls[0]+ls[1])*N], ls[1], N, nil, false, e)
	r.NTT(s, s)
	r.NTT(e, e)
	// pk is stored in NTT and Montgomery form: the Montgomery product gives a*s in NTT.
	r.MulCoeffsMontgomeryThenSub(s, pk.v.Value[1].Q, e)
	return e
}

func keyArgs(ph, pkh C.uint64_t, limbs *C.int64_t) (*ring.Ring, *PK, [2]int, int) {
	P := params(ph).P
	pk := get[*PK](uint64(pkh), "public key")
	bound(uint64(ph), pk.ph, "public key")
	var ls [2]int
	for i, v := range i64s(limbs, 2) {
		if v < 1 || v > 8 {
			fail(codeArgument, "component %d: limb count %d not in 1..8", i, v)
		}
		ls[i] = int(v)
	}
	return P.RingQ(), pk, ls, P.N()
}

// he_keyproof_hash hashes A_k = F(z_k) - chal[k] pk0, k = 0..rows-1 (NTT residues over all
// Q primes) with SHA-256 into out (32 bytes). The prover calls it with target = 0 on its
// masks (A_k = F(y_k)), the verifier with target = 1, the responses and the challenge bits.
//
//export he_keyproof_hash
func he_keyproof_hash(ph, pkh C.uint64_t, limbs *C.int64_t, rows C.int, z *C.int64_t, target C.int, chal *C.uchar, out *C.uchar, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	r, pk, ls, N := keyArgs(ph, pkh, limbs)
	per := (ls[0] + ls[1]) * N
	if rows < 1 {
		fail(codeArgument, "rows must be >= 1")
	}
	zs := i64s(z, int(rows)*per)
	var ch []byte
	var pk0 ring.Poly
	if target != 0 {
		ch = inBytes(chal, C.size_t(rows))
		for _, b := range ch {
			if b > 1 {
				fail(codeArgument, "challenge entries must be 0 or 1")
			}
		}
		pk0 = r.NewPoly()
		r.IMForm(pk.v.Value[0].Q, pk0)
	}
	hdr := make([]byte, 8)
	binary.LittleEndian.PutUint32(hdr[0:], uint32(r.Level()))
	binary.LittleEndian.PutUint32(hdr[4:], uint32(rows))
	sum := popkHashRows(r, int(rows), "secinfer/crisp-pk/v1", hdr, func(k int) []ring.Poly {
		im := keyImage(r, pk, ls, zs[k*per:(k+1)*per], N)
		if target != 0 && ch[k] == 1 {
			r.Sub(im, pk0, im)
		}
		return []ring.Poly{im}
	})
	copy(unsafe.Slice((*byte)(unsafe.Pointer(out)), 32), sum)
	return codeOK
}

// he_keyproof_image writes F(z) for one argument as coefficient-domain residues
// (QCount rows of N): tests compare it with pk0 and with big-integer arithmetic.
//
//export he_keyproof_image
func he_keyproof_image(ph, pkh C.uint64_t, limbs *C.int64_t, z *C.int64_t, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	r, pk, ls, N := keyArgs(ph, pkh, limbs)
	im := keyImage(r, pk, ls, i64s(z, (ls[0]+ls[1])*N), N)
	r.INTT(im, im)
	L := r.Level() + 1
	dst := u64s(out, L*N)
	for l := 0; l < L; l++ {
		copy(dst[l*N:(l+1)*N], im.Coeffs[l])
	}
	return codeOK
}
