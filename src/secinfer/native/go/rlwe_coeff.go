package main

/*
#include <stdint.h>
#include <stdlib.h>
*/
import "C"

import (
	"github.com/tuneinsight/lattigo/v6/core/rlwe"
	"github.com/tuneinsight/lattigo/v6/ring"

	"secinfer/native/fastpack"
	"secinfer/native/he"
)

// Exports of coefficient encoding, LWE batches, packing, expand, trace, caller-visible
// encryption randomness, flooding and raw residues; the logic is in package he.

func ringDims(logSlots int) ring.Dimensions { return he.RingDims(logSlots) }

// LWEBatch holds LWE ciphertexts in "constant-term RLWE form" (he/coeff.go).
type LWEBatch struct {
	ph    uint64
	level int
	cts   []*rlwe.Ciphertext
}

func getLWE(ph, h C.uint64_t) *LWEBatch { return getOwned[*LWEBatch](ph, h, "LWE batch") }

func putLWE(ph uint64, level int, cts []*rlwe.Ciphertext, out *C.uint64_t) {
	*out = C.uint64_t(put(&LWEBatch{ph: ph, level: level, cts: cts}))
}

// he_coeff_encode makes a plaintext whose polynomial coefficients are round(vals[j]*scale).
//
//export he_coeff_encode
func he_coeff_encode(ph C.uint64_t, vals *C.double, n C.int, level C.int, scale C.double, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	pt := he.CoeffEncode(P, f64s(vals, int(n)), int(level), float64(scale))
	*out = C.uint64_t(put(&PT{ph: uint64(ph), v: pt}))
	return codeOK
}

// he_coeff_decode writes centred coefficients / scale.
//
//export he_coeff_decode
func he_coeff_decode(ph C.uint64_t, pth C.uint64_t, out *C.double, n C.int, scale C.double, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	pt := getPT(ph, pth)
	if int(n) != P.N() {
		fail(codeArgument, "output must have N = %d entries", P.N())
	}
	he.CoeffDecode(P, pt.v, float64(scale), f64s(out, int(n)))
	return codeOK
}

// ---------------------------------------------------------------- LWE batches

//export he_lwe_extract
func he_lwe_extract(ph C.uint64_t, cth C.uint64_t, idx *C.int64_t, k C.int, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	ct := getCT(ph, cth)
	putLWE(uint64(ph), ct.v.Level(), he.LWEExtract(params(ph).P, ct.v, i64s(idx, int(k))), out)
	return codeOK
}

//export he_lwe_info
func he_lwe_info(ph C.uint64_t, bh C.uint64_t, count, level *C.int, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	b := getLWE(ph, bh)
	*count = C.int(len(b.cts))
	*level = C.int(b.level)
	return codeOK
}

// he_lwe_lincomb computes out[r] = sum_j w[r*k+j] * in[j] for small integer weights.
//
//export he_lwe_lincomb
func he_lwe_lincomb(ph C.uint64_t, bh C.uint64_t, w *C.int64_t, m C.int, k C.int, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	b := getLWE(ph, bh)
	if int(k) != len(b.cts) {
		fail(codeArgument, "weight matrix has %d columns, batch has %d ciphertexts", k, len(b.cts))
	}
	putLWE(b.ph, b.level, he.LWELincomb(P, b.level, b.cts, i64s(w, int(m)*int(k)), int(m)), out)
	return codeOK
}

// he_lwe_select builds a batch from chosen members (permutations, duplicates allowed).
//
//export he_lwe_select
func he_lwe_select(ph C.uint64_t, bh C.uint64_t, idx *C.int64_t, n C.int, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	b := getLWE(ph, bh)
	var cts []*rlwe.Ciphertext
	for _, i := range i64s(idx, int(n)) {
		if i < 0 || int(i) >= len(b.cts) {
			fail(codeArgument, "index %d out of [0, %d)", i, len(b.cts))
		}
		cts = append(cts, b.cts[i].CopyNew())
	}
	putLWE(b.ph, b.level, cts, out)
	return codeOK
}

// he_lwe_export writes the classic LWE form: b[t][l] and a[t][l][j] with b + <a, s> = m + e.
//
//export he_lwe_export
func he_lwe_export(ph C.uint64_t, bh C.uint64_t, bout *C.uint64_t, aout *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	b := getLWE(ph, bh)
	L := b.level + 1
	he.LWEExport(P, b.level, b.cts, u64s(bout, len(b.cts)*L), u64s(aout, len(b.cts)*L*P.N()))
	return codeOK
}

// he_lwe_import is the inverse of he_lwe_export (values are checked against the moduli).
//
//export he_lwe_import
func he_lwe_import(ph C.uint64_t, level C.int, count C.int, bin *C.uint64_t, ain *C.uint64_t, logScale C.double, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	if int(level) < 0 || int(level) > P.MaxLevel() {
		fail(codeSerial, "LWE level %d out of range for this parameter set", level)
	}
	if count < 0 {
		fail(codeArgument, "negative count")
	}
	L := int(level) + 1
	cts := he.LWEImport(P, int(level), int(count), u64s(bin, int(count)*L), u64s(ain, int(count)*L*P.N()), float64(logScale))
	putLWE(uint64(ph), int(level), cts, out)
	return codeOK
}

// he_lwe_decrypt writes (b + <a, s>) centred / scale for each member (tests only).
//
//export he_lwe_decrypt
func he_lwe_decrypt(ph C.uint64_t, skh C.uint64_t, bh C.uint64_t, out *C.double, scale C.double, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	sk := getSK(ph, skh)
	b := getLWE(ph, bh)
	he.LWEDecrypt(params(ph).P, sk.v, b.level, b.cts, float64(scale), f64s(out, len(b.cts)))
	return codeOK
}

// ---------------------------------------------------------------- packing, expand, trace

func (e *Eval) packer() *rlwe.RingPackingEvaluator {
	P := get[*Params](e.ph, "parameter set").P
	logN := P.LogN()
	return rlwe.NewRingPackingEvaluator(&rlwe.RingPackingEvaluationKey{
		Parameters:  map[int]rlwe.ParameterProvider{logN: P},
		RepackKeys:  map[int]rlwe.EvaluationKeySet{logN: e.evk},
		ExtractKeys: map[int]rlwe.EvaluationKeySet{logN: e.evk},
	})
}

func (e *Eval) requireGalois(els []uint64, what string) {
	for _, g := range els {
		if g == 1 {
			continue // the identity needs no key
		}
		if _, err := e.evk.GetGaloisKey(g); err != nil {
			fail(codeArgument, "%s needs the Galois key for element %d (generate the %s keys)", what, g, what)
		}
	}
}

// he_lwe_pack packs batch member t into coefficient pos[t] of one RLWE ciphertext.
//
//export he_lwe_pack
func he_lwe_pack(ph C.uint64_t, evh C.uint64_t, bh C.uint64_t, pos *C.int64_t, n C.int, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	e := getEval(ph, evh)
	b := getLWE(ph, bh)
	if int(n) != len(b.cts) || n == 0 {
		fail(codeArgument, "need one position per LWE ciphertext (%d given for %d)", n, len(b.cts))
	}
	// fastpack's tree packing (depth 0): Lattigo's Pack without its N-fold key-switch
	// noise growth, reading the members in place.  [SAFHIRE Sec. 2.4, 4.4]
	e.requireGalois(fastpack.PackGaloisElements(P.Parameters, 0), "pack")
	positions := make([]int, n)
	for t, p := range i64s(pos, int(n)) {
		positions[t] = int(p)
	}
	res, _, err := fastpack.NewPacker(P.Parameters, e.evk).Pack(lweBatchAsFast(P.N(), b), positions, 1)
	check(err, codeArgument, "pack")
	res.Scale = b.cts[0].Scale
	res.LogDimensions = ringDims(0)
	res.IsBatched = false
	newCT(ph, res, out)
	return codeOK
}

// he_expand: Lattigo's Expand (constant term = coefficient i, i multiple of 2^logGap).
//
//export he_expand
func he_expand(ph C.uint64_t, evh C.uint64_t, cth C.uint64_t, logGap C.int, outIdx *C.int64_t, outs *C.uint64_t, nout C.int, written *C.int, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	e := getEval(ph, evh)
	ct := getCT(ph, cth)
	if int(logGap) < 0 || int(logGap) > P.LogN() {
		fail(codeArgument, "logGap out of range")
	}
	e.requireGalois(rlwe.GaloisElementsForExpand(P, P.LogN()), "expand")
	var res map[int]*rlwe.Ciphertext
	var err error
	withLock(&e.mu, func() { res, err = e.packer().Expand(ct.v, int(logGap)) })
	check(err, codeHE, "expand")
	idx, hs := i64s(outIdx, int(nout)), u64s(outs, int(nout))
	w := 0
	for i := 0; i < P.N(); i++ {
		c, ok := res[i]
		if !ok {
			continue
		}
		if w >= len(hs) {
			fail(codeArgument, "output buffer too small")
		}
		idx[w] = int64(i)
		hs[w] = put(&CT{ph: uint64(ph), v: c})
		w++
	}
	*written = C.int(w)
	return codeOK
}

//export he_trace
func he_trace(ph C.uint64_t, evh C.uint64_t, cth C.uint64_t, logN C.int, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	e := getEval(ph, evh)
	ct := getCT(ph, cth)
	if int(logN) < 0 || int(logN) > P.LogN() || ct.v.Degree() != 1 {
		fail(codeArgument, "trace needs a degree-1 ciphertext and 0 <= logN <= %d", P.LogN())
	}
	e.requireGalois(rlwe.GaloisElementsForTrace(P, int(logN)), "trace")
	res := rlwe.NewCiphertext(P, 1, ct.v.Level())
	var err error
	withLock(&e.mu, func() { err = e.ev.Trace(ct.v, int(logN), res) })
	check(err, codeHE, "trace")
	newCT(ph, res, out)
	return codeOK
}

// ---------------------------------------------------------------- caller-visible randomness

// he_encrypt_rand: he.EncryptRand; mode 0 samples u, e0, e1 (written out), 1 takes them.
//
//export he_encrypt_rand
func he_encrypt_rand(ph C.uint64_t, pkh C.uint64_t, pth C.uint64_t, mode C.int, seed *C.uchar, seedlen C.size_t, u, e0, e1 *C.int64_t, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	pk := getPK(ph, pkh)
	pt := getPT(ph, pth)
	N := P.N()
	var key []byte
	switch mode {
	case 0:
		key = inBytes(seed, seedlen)
	case 1:
	default:
		fail(codeArgument, "mode must be 0 (sample) or 1 (given)")
	}
	newCT(ph, he.EncryptRand(P, pk.v, pt.v, key, i64s(u, N), i64s(e0, N), i64s(e1, N)), out)
	return codeOK
}

// he_flood: he.Flood (noise flooding before a ciphertext goes back to the key owner).
//
//export he_flood
func he_flood(ph C.uint64_t, pkh C.uint64_t, cth C.uint64_t, logBound C.int, seed *C.uchar, seedlen C.size_t, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	pk := getPK(ph, pkh)
	if pk.qOnly {
		fail(codeArgument, "this public key is valid over Q only: flooding encrypts with Lattigo's encryptor")
	}
	ct := getCT(ph, cth)
	newCT(ph, he.Flood(P, pk.v, ct.v, int(logBound), inBytes(seed, seedlen)), out)
	return codeOK
}

// ---------------------------------------------------------------- noise and raw coefficients

// he_noise writes log2(std), log2(max |.|) of dec(ct) - pt (pt may be 0: then of dec(ct)).
//
//export he_noise
func he_noise(ph C.uint64_t, skh C.uint64_t, cth C.uint64_t, pth C.uint64_t, out *C.double, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	sk := getSK(ph, skh)
	ct := getCT(ph, cth)
	var pt *rlwe.Plaintext
	if pth != 0 {
		pt = getPT(ph, pth).v
	}
	std, mx := he.Noise(params(ph).P, sk.v, ct.v, pt)
	copy(f64s(out, 2), []float64{std, mx})
	return codeOK
}

// he_poly writes the coefficient-domain residues (level+1 rows of N) of component `which`
// of a ciphertext, plaintext, secret key (Q part) or public key (Q part).
//
//export he_poly
func he_poly(ph C.uint64_t, h C.uint64_t, which C.int, out *C.uint64_t, n C.int, levels *C.int, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	var p ring.Poly
	ntt, mont := true, false
	switch o := anyOwned(ph, h).(type) {
	case *CT:
		if int(which) < 0 || int(which) > o.v.Degree() {
			fail(codeArgument, "component out of range")
		}
		p, ntt = o.v.Value[which], o.v.IsNTT
	case *PT:
		p, ntt = o.v.Value, o.v.IsNTT
	case *SK:
		p, mont = o.v.Value.Q, true
	case *PK:
		if which != 0 && which != 1 {
			fail(codeArgument, "component out of range")
		}
		p, mont = o.v.Value[which].Q, true
	default:
		fail(codeArgument, "handle %d has no polynomial", h)
	}
	*levels = C.int(he.Residues(P, p, ntt, mont, u64s(out, int(n))))
	return codeOK
}
