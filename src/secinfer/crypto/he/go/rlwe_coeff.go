package main

/*
#include <stdint.h>
#include <stdlib.h>
*/
import "C"

import (
	"math"
	"math/big"
	"math/bits"

	"github.com/tuneinsight/lattigo/v6/core/rlwe"
	"github.com/tuneinsight/lattigo/v6/ring"
	"github.com/tuneinsight/lattigo/v6/schemes/ckks"
	"github.com/tuneinsight/lattigo/v6/utils/sampling"

	"secinfer/he/fastpack"
)

type ring_Poly = ring.Poly

type ckksParams = ckks.Parameters

func ringDims(logSlots int) ring.Dimensions { return ring.Dimensions{Rows: 0, Cols: logSlots} }

// LWEBatch holds LWE ciphertexts in "constant-term RLWE form" in the coefficient domain:
// c0 has only its constant coefficient set (b), and c1 is the polynomial whose product with
// s has <a, s> as constant coefficient. Decryption: b + <a, s> = m + e.  [SAFHIRE Sec. 2.1]
type LWEBatch struct {
	ph    uint64
	level int
	cts   []*rlwe.Ciphertext
}

func getLWE(ph C.uint64_t, h C.uint64_t) *LWEBatch {
	b := get[*LWEBatch](uint64(h), "LWE batch")
	bound(uint64(ph), b.ph, "LWE batch")
	return b
}

// setSigned writes the integer x (as big.Int) into coefficient j of every RNS level.
func setSigned(r *ring.Ring, p ring.Poly, j int, x *big.Int) {
	tmp := new(big.Int)
	for l, s := range r.SubRings[:r.Level()+1] {
		p.Coeffs[l][j] = tmp.Mod(x, new(big.Int).SetUint64(s.Modulus)).Uint64()
	}
}

// f64Residues writes an integral float64 x = mant * 2^e (|mant| < 2^53) into every RNS
// level as (mant mod q) * (2^e mod q) mod q: the same residues as converting x to a big.Int
// and reducing it, without allocating per coefficient.
type f64Residues struct {
	mods []uint64
	pow2 [][]uint64 // pow2[l][e] = 2^e mod q_l, e < 1024
}

func newF64Residues(r *ring.Ring) *f64Residues {
	f := &f64Residues{}
	for _, s := range r.SubRings[:r.Level()+1] {
		q := s.Modulus
		tab := make([]uint64, 1024)
		tab[0] = 1 % q
		for e := 1; e < 1024; e++ {
			hi, lo := bits.Mul64(tab[e-1], 2)
			tab[e] = bits.Rem64(hi, lo, q)
		}
		f.mods = append(f.mods, q)
		f.pow2 = append(f.pow2, tab)
	}
	return f
}

func (f *f64Residues) set(p ring.Poly, j int, x float64) {
	neg := x < 0
	if neg {
		x = -x
	}
	frac, e := math.Frexp(x) // x = frac * 2^e, frac in [0.5, 1)
	var mant uint64
	shift := 0
	if e <= 53 {
		mant = uint64(x) // exact: x is an integer below 2^53
	} else {
		mant = uint64(math.Ldexp(frac, 53)) // exact: 53-bit significand
		shift = e - 53
	}
	for l, q := range f.mods {
		hi, lo := bits.Mul64(mant%q, f.pow2[l][shift])
		v := bits.Rem64(hi, lo, q)
		if neg && v != 0 {
			v = q - v
		}
		p.Coeffs[l][j] = v
	}
}

func polyFromInts(r *ring.Ring, vals []int64) ring.Poly {
	p := r.NewPoly()
	for l, s := range r.SubRings[:r.Level()+1] {
		q := s.Modulus
		for j, v := range vals {
			if v >= 0 {
				p.Coeffs[l][j] = uint64(v) % q
			} else {
				p.Coeffs[l][j] = (q - uint64(-v)%q) % q
			}
		}
	}
	return p
}

func centered(r *ring.Ring, p ring.Poly) []*big.Int {
	out := make([]*big.Int, r.N())
	for i := range out {
		out[i] = new(big.Int)
	}
	r.PolyToBigintCentered(p, 1, out)
	return out
}

// ---------------------------------------------------------------- coefficient encoding

// he_coeff_encode makes a plaintext whose polynomial coefficients are round(vals[j]*scale).
//
//export he_coeff_encode
func he_coeff_encode(ph C.uint64_t, vals *C.double, n C.int, level C.int, scale C.double, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	if int(level) < 0 || int(level) > P.MaxLevel() {
		fail(codeArgument, "level %d out of range", level)
	}
	if int(n) > P.N() {
		fail(codeArgument, "%d coefficients exceed N = %d", n, P.N())
	}
	if !(float64(scale) > 0) || math.IsInf(float64(scale), 0) {
		fail(codeArgument, "scale must be positive and finite")
	}
	r := P.RingQ().AtLevel(int(level))
	pt := rlwe.NewPlaintext(P, int(level))
	enc := newF64Residues(r)
	for j, v := range f64s(vals, int(n)) {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			fail(codeArgument, "coefficient %d is not finite", j)
		}
		x := math.Round(v * float64(scale))
		if math.IsInf(x, 0) {
			fail(codeArgument, "coefficient %d overflows after scaling", j)
		}
		enc.set(pt.Value, j, x)
	}
	pt.Scale = rlwe.NewScale(float64(scale))
	pt.IsBatched = false
	if pt.IsNTT {
		r.NTT(pt.Value, pt.Value)
	}
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
	r := P.RingQ().AtLevel(pt.v.Level())
	p := *pt.v.Value.CopyNew()
	if pt.v.IsNTT {
		r.INTT(p, p)
	}
	dst := f64s(out, int(n))
	s := new(big.Float).SetFloat64(float64(scale))
	for j, c := range centered(r, p) {
		f, _ := new(big.Float).Quo(new(big.Float).SetInt(c), s).Float64()
		dst[j] = f
	}
	return codeOK
}

// ---------------------------------------------------------------- LWE extraction

//export he_lwe_extract
func he_lwe_extract(ph C.uint64_t, cth C.uint64_t, idx *C.int64_t, k C.int, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	ct := getCT(ph, cth)
	if ct.v.Degree() != 1 {
		fail(codeArgument, "LWE extraction needs a degree-1 ciphertext")
	}
	level := ct.v.Level()
	r := P.RingQ().AtLevel(level)
	c0, c1 := *ct.v.Value[0].CopyNew(), *ct.v.Value[1].CopyNew()
	if ct.v.IsNTT {
		r.INTT(c0, c0)
		r.INTT(c1, c1)
	}
	N := P.N()
	batch := &LWEBatch{ph: uint64(ph), level: level}
	for _, i := range i64s(idx, int(k)) {
		if i < 0 || int(i) >= N {
			fail(codeArgument, "coefficient index %d out of [0, %d)", i, N)
		}
		// X^{-i} * (c0, c1) moves coefficient i to the constant term.  [SAFHIRE Sec. 4.3]
		lwe := rlwe.NewCiphertext(P, 1, level)
		*lwe.MetaData = *ct.v.MetaData
		lwe.IsNTT = false
		for l := 0; l <= level; l++ {
			lwe.Value[0].Coeffs[l][0] = c0.Coeffs[l][i]
		}
		r.MultByMonomial(c1, -int(i), lwe.Value[1])
		batch.cts = append(batch.cts, lwe)
	}
	*out = C.uint64_t(put(batch))
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
	r := P.RingQ().AtLevel(b.level)
	ws := i64s(w, int(m)*int(k))
	res := &LWEBatch{ph: b.ph, level: b.level}
	for row := 0; row < int(m); row++ {
		acc := rlwe.NewCiphertext(P, 1, b.level)
		if len(b.cts) > 0 {
			*acc.MetaData = *b.cts[0].MetaData
		}
		acc.IsNTT = false
		for j, ct := range b.cts {
			wt := ws[row*int(k)+j]
			if wt == 0 {
				continue
			}
			if wt == math.MinInt64 {
				fail(codeArgument, "weight out of range")
			}
			for c := 0; c < 2; c++ {
				if wt > 0 {
					r.MulScalarThenAdd(ct.Value[c], uint64(wt), acc.Value[c])
				} else {
					r.MulScalarThenSub(ct.Value[c], uint64(-wt), acc.Value[c])
				}
			}
		}
		res.cts = append(res.cts, acc)
	}
	*out = C.uint64_t(put(res))
	return codeOK
}

// he_lwe_select builds a batch from chosen members (permutations, duplicates allowed).
//
//export he_lwe_select
func he_lwe_select(ph C.uint64_t, bh C.uint64_t, idx *C.int64_t, n C.int, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	b := getLWE(ph, bh)
	res := &LWEBatch{ph: b.ph, level: b.level}
	for _, i := range i64s(idx, int(n)) {
		if i < 0 || int(i) >= len(b.cts) {
			fail(codeArgument, "index %d out of [0, %d)", i, len(b.cts))
		}
		res.cts = append(res.cts, b.cts[i].CopyNew())
	}
	*out = C.uint64_t(put(res))
	return codeOK
}

// he_lwe_export writes the classic LWE form: b[t][l] and a[t][l][j] with b + <a, s> = m + e.
//
//export he_lwe_export
func he_lwe_export(ph C.uint64_t, bh C.uint64_t, bout *C.uint64_t, aout *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	b := getLWE(ph, bh)
	N, L := P.N(), b.level+1
	bs := u64s(bout, len(b.cts)*L)
	as := u64s(aout, len(b.cts)*L*N)
	for t, ct := range b.cts {
		for l := 0; l < L; l++ {
			q := P.Q()[l]
			bs[t*L+l] = ct.Value[0].Coeffs[l][0]
			c1 := ct.Value[1].Coeffs[l]
			row := as[(t*L+l)*N : (t*L+l+1)*N]
			row[0] = c1[0]
			for j := 1; j < N; j++ {
				row[j] = (q - c1[N-j]) % q
			}
		}
	}
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
	N, L := P.N(), int(level)+1
	bs := u64s(bin, int(count)*L)
	as := u64s(ain, int(count)*L*N)
	res := &LWEBatch{ph: uint64(ph), level: int(level)}
	for t := 0; t < int(count); t++ {
		ct := rlwe.NewCiphertext(P, 1, int(level))
		ct.IsNTT = false
		ct.Scale = rlwe.NewScale(math.Exp2(float64(logScale)))
		for l := 0; l < L; l++ {
			q := P.Q()[l]
			bv := bs[t*L+l]
			if bv >= q {
				fail(codeSerial, "LWE value not reduced modulo q_%d", l)
			}
			ct.Value[0].Coeffs[l][0] = bv
			row := as[(t*L+l)*N : (t*L+l+1)*N]
			c1 := ct.Value[1].Coeffs[l]
			for j := 0; j < N; j++ {
				if row[j] >= q {
					fail(codeSerial, "LWE value not reduced modulo q_%d", l)
				}
			}
			c1[0] = row[0]
			for j := 1; j < N; j++ {
				c1[N-j] = (q - row[j]) % q
			}
		}
		res.cts = append(res.cts, ct)
	}
	*out = C.uint64_t(put(res))
	return codeOK
}

// he_lwe_decrypt writes (b + <a, s>) centred / scale for each member (tests only).
//
//export he_lwe_decrypt
func he_lwe_decrypt(ph C.uint64_t, skh C.uint64_t, bh C.uint64_t, out *C.double, scale C.double, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	sk := getSK(ph, skh)
	b := getLWE(ph, bh)
	dec := rlwe.NewDecryptor(P, sk.v)
	r := P.RingQ().AtLevel(b.level)
	dst := f64s(out, len(b.cts))
	s := new(big.Float).SetFloat64(float64(scale))
	for t, ct := range b.cts {
		pt := dec.DecryptNew(ct)
		if pt.IsNTT {
			r.INTT(pt.Value, pt.Value)
		}
		c := centered(r, pt.Value)[0]
		dst[t], _ = new(big.Float).Quo(new(big.Float).SetInt(c), s).Float64()
	}
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

// he_lwe_pack packs batch member t into coefficient pos[t] of one RLWE ciphertext, zeroing
// every other coefficient with automorphism (trace) key switching.  [SAFHIRE Sec. 2.4, 4.4]
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
	// The tree packing of the fastpack sub-package (depth 0): the same n - 1 + log2(N/n)
	// key switches as Lattigo's Pack for spread positions, without its N-fold key-switch
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

// he_expand splits an RLWE ciphertext into ciphertexts whose constant term is coefficient
// i (i multiple of 2^logGap) of the input (Lattigo's Expand).
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

// he_encrypt_rand encrypts pt under pk as c0 = pk0*u + e0 + m, c1 = pk1*u + e1 (mod Q at the
// plaintext's level, no special-prime rounding), so that a prover can later show the
// ciphertext was formed correctly.  [CRISP-certified Sec. 4]  mode 0: sample u (ternary,
// the key distribution) and e0, e1 (the error distribution) from a PRNG keyed with seed and
// write them out; mode 1: use the caller's u, e0, e1 (checked against the distributions' bounds).
//
//export he_encrypt_rand
func he_encrypt_rand(ph C.uint64_t, pkh C.uint64_t, pth C.uint64_t, mode C.int, seed *C.uchar, seedlen C.size_t, u, e0, e1 *C.int64_t, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	pk := get[*PK](uint64(pkh), "public key")
	bound(uint64(ph), pk.ph, "public key")
	pt := getPT(ph, pth)
	N := P.N()
	us, e0s, e1s := i64s(u, N), i64s(e0, N), i64s(e1, N)
	ebound := int64(math.Ceil(P.NoiseBound()))
	switch mode {
	case 0:
		key := inBytes(seed, seedlen)
		if len(key) < 16 {
			fail(codeArgument, "seed must have at least 16 bytes")
		}
		prng, err := sampling.NewKeyedPRNG(key)
		check(err, codeHE, "prng")
		r0 := P.RingQ().AtLevel(0)
		xs, err := ring.NewSampler(prng, r0, P.Xs(), false)
		check(err, codeHE, "ternary sampler")
		xe, err := ring.NewSampler(prng, r0, P.Xe(), false)
		check(err, codeHE, "gaussian sampler")
		q0 := P.Q()[0]
		read := func(s ring.Sampler, dst []int64) {
			p := r0.NewPoly()
			s.Read(p)
			for j, c := range p.Coeffs[0] {
				if c > q0/2 {
					dst[j] = -int64(q0 - c)
				} else {
					dst[j] = int64(c)
				}
			}
		}
		read(xs, us)
		read(xe, e0s)
		read(xe, e1s)
	case 1:
		for j := 0; j < N; j++ {
			if us[j] < -1 || us[j] > 1 {
				fail(codeArgument, "u must be ternary (coefficient %d is %d)", j, us[j])
			}
			if e0s[j] < -ebound || e0s[j] > ebound || e1s[j] < -ebound || e1s[j] > ebound {
				fail(codeArgument, "error coefficient %d exceeds the error bound %d", j, ebound)
			}
		}
	default:
		fail(codeArgument, "mode must be 0 (sample) or 1 (given)")
	}
	if !pt.v.IsNTT {
		fail(codeArgument, "plaintext must be in the NTT domain")
	}
	level := pt.v.Level()
	r := P.RingQ().AtLevel(level)
	uP, e0P, e1P := polyFromInts(r, us), polyFromInts(r, e0s), polyFromInts(r, e1s)
	r.NTT(uP, uP)
	r.NTT(e0P, e0P)
	r.NTT(e1P, e1P)
	ct := rlwe.NewCiphertext(P, 1, level)
	*ct.MetaData = *pt.v.MetaData
	// pk is stored in NTT and Montgomery form, so MulCoeffsMontgomery yields pk*u in NTT.
	r.MulCoeffsMontgomery(uP, pk.v.Value[0].Q, ct.Value[0])
	r.MulCoeffsMontgomery(uP, pk.v.Value[1].Q, ct.Value[1])
	r.Add(ct.Value[0], e0P, ct.Value[0])
	r.Add(ct.Value[0], pt.v.Value, ct.Value[0])
	r.Add(ct.Value[1], e1P, ct.Value[1])
	newCT(ph, ct, out)
	return codeOK
}

// ---------------------------------------------------------------- noise flooding

// he_flood returns ct + Enc_pk(0) + f where f has i.i.d. uniform coefficients in
// [-2^logBound, 2^logBound], drawn from a PRNG keyed with seed (circuit privacy before a
// ciphertext goes back to the key owner).
//
//export he_flood
func he_flood(ph C.uint64_t, pkh C.uint64_t, cth C.uint64_t, logBound C.int, seed *C.uchar, seedlen C.size_t, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	pk := get[*PK](uint64(pkh), "public key")
	bound(uint64(ph), pk.ph, "public key")
	if pk.qOnly {
		fail(codeArgument, "this public key is valid over Q only: flooding encrypts with Lattigo's encryptor")
	}
	ct := getCT(ph, cth)
	if ct.v.Degree() != 1 {
		fail(codeArgument, "flooding needs a degree-1 ciphertext")
	}
	level := ct.v.Level()
	if int(logBound) < 0 || int(logBound) > 62 || float64(logBound)+2 > math.Log2(float64(P.Q()[0])) {
		fail(codeArgument, "flooding bound 2^%d too large for q_0", logBound)
	}
	key := inBytes(seed, seedlen)
	if len(key) < 16 {
		fail(codeArgument, "seed must have at least 16 bytes")
	}
	prng, err := sampling.NewKeyedPRNG(key)
	check(err, codeHE, "prng")
	r := P.RingQ().AtLevel(level)
	N := P.N()
	width := uint64(1)<<(uint(logBound)+1) + 1
	buf := make([]byte, 8*N)
	_, err = prng.Read(buf)
	check(err, codeHE, "prng read")
	f := make([]int64, N)
	for j := 0; j < N; j++ {
		var v uint64
		for b := 0; b < 8; b++ {
			v |= uint64(buf[8*j+b]) << (8 * b)
		}
		f[j] = int64(v%width) - int64(width/2)
	}
	fP := polyFromInts(r, f)
	zero := rlwe.NewCiphertext(P, 1, level)
	*zero.MetaData = *ct.v.MetaData
	check(rlwe.NewEncryptor(P, pk.v).EncryptZero(zero), codeHE, "encrypt zero")
	res := ct.v.CopyNew()
	if res.IsNTT {
		r.NTT(fP, fP)
	}
	r.Add(res.Value[0], zero.Value[0], res.Value[0])
	r.Add(res.Value[1], zero.Value[1], res.Value[1])
	r.Add(res.Value[0], fP, res.Value[0])
	newCT(ph, res, out)
	return codeOK
}

// ---------------------------------------------------------------- noise and raw coefficients

// he_noise writes log2(std), log2(max |.|) of dec(ct) - pt (pt may be 0: then of dec(ct)).
//
//export he_noise
func he_noise(ph C.uint64_t, skh C.uint64_t, cth C.uint64_t, pth C.uint64_t, out *C.double, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	sk := getSK(ph, skh)
	ct := getCT(ph, cth)
	if ct.v.Degree() != 1 {
		fail(codeArgument, "noise needs a degree-1 ciphertext")
	}
	dec := rlwe.NewDecryptor(P, sk.v).DecryptNew(ct.v)
	level := dec.Level()
	r := P.RingQ().AtLevel(level)
	if pth != 0 {
		pt := getPT(ph, pth)
		if pt.v.Level() < level || pt.v.IsNTT != dec.IsNTT {
			fail(codeArgument, "reference plaintext has a lower level or another domain")
		}
		r.Sub(dec.Value, pt.v.Value, dec.Value)
	}
	if dec.IsNTT {
		r.INTT(dec.Value, dec.Value)
	}
	std, _, mx := rlwe.NormStats(centered(r, dec.Value))
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
	switch o := getAny(uint64(h)).(type) {
	case *CT:
		bound(uint64(ph), o.ph, "ciphertext")
		if int(which) < 0 || int(which) > o.v.Degree() {
			fail(codeArgument, "component out of range")
		}
		p, ntt = *o.v.Value[which].CopyNew(), o.v.IsNTT
	case *PT:
		bound(uint64(ph), o.ph, "plaintext")
		p, ntt = *o.v.Value.CopyNew(), o.v.IsNTT
	case *SK:
		bound(uint64(ph), o.ph, "secret key")
		p, mont = *o.v.Value.Q.CopyNew(), true
	case *PK:
		bound(uint64(ph), o.ph, "public key")
		if which != 0 && which != 1 {
			fail(codeArgument, "component out of range")
		}
		p, mont = *o.v.Value[which].Q.CopyNew(), true
	default:
		fail(codeArgument, "handle %d has no polynomial", h)
	}
	r := P.RingQ().AtLevel(p.Level())
	if mont {
		r.IMForm(p, p)
	}
	if ntt {
		r.INTT(p, p)
	}
	L := p.Level() + 1
	dst := u64s(out, int(n))
	if len(dst) < L*P.N() {
		fail(codeArgument, "buffer too small")
	}
	for l := 0; l < L; l++ {
		copy(dst[l*P.N():(l+1)*P.N()], p.Coeffs[l])
	}
	*levels = C.int(L)
	return codeOK
}
