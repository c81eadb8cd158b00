package main

/*
#include <stdint.h>
#include <stdlib.h>
*/
import "C"

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"math"
	"math/big"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/tuneinsight/lattigo/v6/core/rlwe"
	"github.com/tuneinsight/lattigo/v6/ring"
	"github.com/tuneinsight/lattigo/v6/schemes/ckks"
	"github.com/tuneinsight/lattigo/v6/utils/sampling"

	"secinfer/native/he"
)

// crisp's HE linear layer, batch-path kernels (protocols/crisp, docs/protocols/crisp.md):
//
//   - seeded secret-key encryption (semi-honest client): c1 is expanded from a public
//     16-byte seed (uniform in R_Q, NTT domain), c0 = -c1 s + e + m; only the seed
//     and c0 travel, half a ciphertext. The reader rebuilds c1 from the seed. This is
//     the standard seeded form of symmetric RLWE encryption (c1 = a uniform and public).
//   - crisp_answer: the server's answer in one call: acc + mask, drop the top `drop`
//     primes by exact rounding division (Lattigo's DivRoundByLastModulusManyNTT, the
//     same as `drop` rescales), trimmed to the positions the client reads (trim.go).

const seededSeed = 16

// seededC1 expands the 16-byte seed into c1, uniform in R_Q at `level` (read as NTT-domain
// residues): AES-128-CTR keyed with the seed (zero IV) as the PRG, each residue by
// rejection sampling of a bitlen(q_l)-bit word, levels in order.
func seededC1(P ckks.Parameters, level int, seed []byte) ring.Poly {
	if len(seed) != seededSeed {
		fail(codeArgument, "seed must have %d bytes, got %d", seededSeed, len(seed))
	}
	block, err := aes.NewCipher(seed)
	check(err, codeHE, "AES")
	stream := cipher.NewCTR(block, make([]byte, aes.BlockSize))
	r := P.RingQ().AtLevel(level)
	c1 := r.NewPoly()
	buf := make([]byte, 8*1024)
	off := len(buf)
	for l, q := range P.Q()[:level+1] {
		mask := uint64(1)<<uint(bits.Len64(q)) - 1
		row := c1.Coeffs[l]
		for j := 0; j < len(row); {
			if off == len(buf) {
				clear(buf)
				stream.XORKeyStream(buf, buf)
				off = 0
			}
			v := binary.LittleEndian.Uint64(buf[off:]) & mask
			off += 8
			if v < q {
				row[j] = v
				j++
			}
		}
	}
	return c1
}

func seededRefs(P ckks.Parameters, c0 ring.Poly) []he.PolyRef {
	return []he.PolyRef{{P: c0, Moduli: P.Q()[:c0.Level()+1]}}
}

// seededZero returns c0 = -c1 s + e at `level` (NTT domain), c1 expanded from `seed`:
// the message-independent part of a seeded encryption (e fresh, never from the seed).
func seededZero(P ckks.Parameters, sk *rlwe.SecretKey, level int, seed []byte) ring.Poly {
	r := P.RingQ().AtLevel(level)
	c1 := seededC1(P, level, seed)
	c0 := r.NewPoly()
	r.MulCoeffsMontgomery(c1, sk.Value.Q, c0) // sk: NTT and Montgomery form
	r.Neg(c0, c0)
	prng, err := sampling.NewPRNG()
	check(err, codeHE, "PRNG")
	es, err := ring.NewSampler(prng, P.RingQ(), P.Xe(), false)
	check(err, codeHE, "error sampler")
	e := r.NewPoly()
	es.AtLevel(level).Read(e)
	r.NTT(e, e)
	r.Add(c0, e, c0)
	return c0
}

// seededFinish adds the plaintext (NTT domain, the level of c0) to c0 and packs c0 at
// the primes' widths (serial_format.go, no header).
func seededFinish(P ckks.Parameters, c0 ring.Poly, pt *rlwe.Plaintext, out **C.uchar, outlen *C.size_t) {
	if !pt.IsNTT {
		fail(codeArgument, "seeded encryption needs a plaintext in the NTT domain")
	}
	if pt.Level() != c0.Level() {
		fail(codeArgument, "plaintext at level %d, seeded encryption of zero at %d", pt.Level(), c0.Level())
	}
	P.RingQ().AtLevel(c0.Level()).Add(c0, pt.Value, c0)
	refs := seededRefs(P, c0)
	outBytes(he.WritePolys(make([]byte, 0, he.PolysSize(refs)), refs), out, outlen)
}

// crisp_encrypt_seeded encrypts the plaintext (NTT domain) under sk with c1 from `seed`;
// writes c0 packed at the primes' widths (serial_format.go, no header).
//
//export crisp_encrypt_seeded
func crisp_encrypt_seeded(ph C.uint64_t, skh C.uint64_t, pth C.uint64_t, seed *C.uchar, seedlen C.size_t, out **C.uchar, outlen *C.size_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	sk := getSK(ph, skh)
	pt := getPT(ph, pth)
	if !pt.v.IsNTT {
		fail(codeArgument, "seeded encryption needs a plaintext in the NTT domain")
	}
	seededFinish(P, seededZero(P, sk.v, pt.v.Level(), inBytes(seed, seedlen)), pt.v, out, outlen)
	return codeOK
}

// crisp_seeded_zero: the message-independent part of crisp_encrypt_seeded, made ahead
// (offline): c0 = -c1 s + e at `level`, held as a degree-0 NTT ciphertext.
//
//export crisp_seeded_zero
func crisp_seeded_zero(ph C.uint64_t, skh C.uint64_t, level C.int, seed *C.uchar, seedlen C.size_t, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	sk := getSK(ph, skh)
	if level < 0 || int(level) > P.MaxLevel() {
		fail(codeArgument, "level %d out of range", level)
	}
	ct := rlwe.NewCiphertext(P, 0, int(level))
	ct.Value[0] = seededZero(P, sk.v, int(level), inBytes(seed, seedlen))
	ct.IsNTT = true
	newCT(ph, ct, out)
	return codeOK
}

// crisp_seeded_finish: crisp_encrypt_seeded's output from an encryption of zero made by
// crisp_seeded_zero (with the same seed) and the plaintext; the zero is consumed
// (overwritten: the caller frees it and must not use it again).
//
//export crisp_seeded_finish
func crisp_seeded_finish(ph C.uint64_t, zh C.uint64_t, pth C.uint64_t, out **C.uchar, outlen *C.size_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	z := getCT(ph, zh)
	if z.v.Degree() != 0 || !z.v.IsNTT {
		fail(codeArgument, "not a seeded encryption of zero (degree 0, NTT domain)")
	}
	seededFinish(P, z.v.Value[0], getPT(ph, pth).v, out, outlen)
	return codeOK
}

// crisp_seeded_len writes the byte length of a packed c0 at `level`.
//
//export crisp_seeded_len
func crisp_seeded_len(ph C.uint64_t, level C.int, out *C.size_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	if level < 0 || int(level) > P.MaxLevel() {
		fail(codeArgument, "level %d out of range", level)
	}
	*out = C.size_t(he.PolysSize(seededRefs(P, P.RingQ().AtLevel(int(level)).NewPoly())))
	return codeOK
}

// crisp_seeded_load rebuilds the degree-1 NTT ciphertext (c0 from the packed bytes, c1
// from the seed) at `level` with scale 2^logScale, coefficient encoding. The packed c0
// is read strictly (exact length, reduced residues, zero padding: HESerializationError).
//
//export crisp_seeded_load
func crisp_seeded_load(ph C.uint64_t, level C.int, logScale C.int, data *C.uchar, n C.size_t, seed *C.uchar, seedlen C.size_t, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	if level < 0 || int(level) > P.MaxLevel() || logScale < 0 || logScale > 1000 {
		fail(codeArgument, "level %d or log scale %d out of range", level, logScale)
	}
	if !P.NTTFlag() {
		fail(codeArgument, "seeded ciphertexts need a parameter set in the NTT domain")
	}
	ct := rlwe.NewCiphertext(P, 1, int(level))
	refs := seededRefs(P, ct.Value[0])
	b := inBytes(data, n)
	he.ReadExact(b, refs, "seeded ciphertext")
	ct.Value[1] = seededC1(P, int(level), inBytes(seed, seedlen))
	ct.Scale = rlwe.NewScale(math.Ldexp(1, int(logScale)))
	ct.IsBatched = false
	ct.IsNTT = true
	newCT(ph, ct, out)
	return codeOK
}

// crisp_answer: acc + mask (same level, degree 1, NTT), rescaled by its top `drop` primes,
// trimmed to `pos` (the frame of he_ct_trim). acc is overwritten (the caller frees it).
//
//export crisp_answer
func crisp_answer(ph C.uint64_t, acch C.uint64_t, maskh C.uint64_t, drop C.int, pos *C.int64_t, count C.int, out **C.uchar, outlen *C.size_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	acc, mask := getCT(ph, acch), getCT(ph, maskh)
	if acc.v.Degree() != 1 || mask.v.Degree() != 1 || !acc.v.IsNTT || !mask.v.IsNTT {
		fail(codeArgument, "answer needs degree-1 ciphertexts in the NTT domain")
	}
	level := acc.v.Level()
	if mask.v.Level() != level {
		fail(codeArgument, "answer and mask at levels %d and %d", level, mask.v.Level())
	}
	if drop < 0 || int(drop) > level {
		fail(codeArgument, "cannot drop %d primes from level %d", drop, level)
	}
	idx := he.Positions(P, i64s(pos, max(int(count), 0)))
	r := P.RingQ().AtLevel(level)
	lv := level - int(drop)
	rl := P.RingQ().AtLevel(lv)
	buf := r.NewPoly()
	res := [2]ring.Poly{rl.NewPoly(), rl.NewPoly()}
	for i := 0; i < 2; i++ {
		r.Add(acc.v.Value[i], mask.v.Value[i], acc.v.Value[i])
	}
	// c1 is sent in the NTT domain: Lattigo's INTT, `drop` exact rounding divisions, NTT.
	r.DivRoundByLastModulusManyNTT(int(drop), acc.v.Value[1], buf, res[1])
	// c0 is read in the coefficient domain: the same INTT and divisions, without the NTT
	// back and the INTT after it (the same coefficients: NTT and INTT are inverse
	// bijections mod each prime; ManyNTT is exactly INTT, divisions, NTT).
	r.INTT(acc.v.Value[0], buf)
	if drop > 0 {
		r.DivRoundByLastModulusMany(int(drop), buf, acc.v.Value[0], res[0])
	} else {
		res[0].Copy(buf)
	}
	sel := ring.NewPoly(len(idx), lv)
	for l := range sel.Coeffs {
		row := res[0].Coeffs[l]
		for i, j := range idx {
			sel.Coeffs[l][i] = row[j]
		}
	}
	b := make([]byte, 0, he.TrimLen(P, lv, len(idx)))
	b = he.WritePolys(b, he.TrimRefs(P, sel, res[1]))
	outBytes(b, out, outlen)
	return codeOK
}

// crisp_decode: residues (level + 1 rows of count, row l mod q_l) of decrypted answers ->
// the client's shares: x = CRT(residues) in [0, Q'), Y = [x t]_Q' centred, low = Y mod t,
// u = low * back mod t, halved when `halve` (the factor-2 encoding), written as `limbs`
// little-endian words per value (u < 2^(64 limbs) is the caller's guarantee); *noise =
// log2 of max |(Y - low) / t| (0 when 0). t = 2^tbits; back: little-endian bytes.
//
//export crisp_decode
func crisp_decode(ph C.uint64_t, level C.int, res *C.uint64_t, count C.int, tbits C.int, back *C.uchar, backlen C.size_t, halve C.int, limbs C.int, out *C.uint64_t, noise *C.double, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	if level < 0 || int(level) > P.MaxLevel() || count < 1 || tbits < 1 || tbits > 256 || limbs < 1 || limbs > 4 {
		fail(codeArgument, "level %d, count %d, tbits %d or limbs %d out of range", level, count, tbits, limbs)
	}
	lv, cnt := int(level), int(count)
	moduli := P.Q()[:lv+1]
	Q := big.NewInt(1)
	for _, q := range moduli {
		Q.Mul(Q, new(big.Int).SetUint64(q))
	}
	crt := make([]*big.Int, len(moduli))
	for l, q := range moduli {
		bq := new(big.Int).SetUint64(q)
		m := new(big.Int).Quo(Q, bq)
		inv := new(big.Int).ModInverse(new(big.Int).Mod(m, bq), bq)
		crt[l] = new(big.Int).Mod(new(big.Int).Mul(m, inv), Q)
	}
	half := new(big.Int).Rsh(Q, 1)
	t := new(big.Int).Lsh(big.NewInt(1), uint(tbits))
	bb := inBytes(back, backlen)
	be := make([]byte, len(bb))
	for i := range bb {
		be[len(bb)-1-i] = bb[i]
	}
	bk := new(big.Int).Mod(new(big.Int).SetBytes(be), t)
	in := u64s(res, (lv+1)*cnt)
	dst := u64s(out, cnt*int(limbs))
	x, tmp, low, eps, maxEps := new(big.Int), new(big.Int), new(big.Int), new(big.Int), new(big.Int)
	for i := 0; i < cnt; i++ {
		x.SetInt64(0)
		for l, q := range moduli {
			v := in[l*cnt+i]
			if v >= q {
				fail(codeArgument, "residue not reduced modulo prime %d", l)
			}
			x.Add(x, tmp.Mul(tmp.SetUint64(v), crt[l]))
		}
		x.Mod(x, Q)
		x.Mul(x, t)
		x.Mod(x, Q)
		if x.Cmp(half) > 0 {
			x.Sub(x, Q)
		}
		low.Mod(x, t) // Euclidean: in [0, t)
		eps.Sub(x, low)
		eps.Rsh(eps.Abs(eps), uint(tbits))
		if eps.Cmp(maxEps) > 0 {
			maxEps.Set(eps)
		}
		low.Mul(low, bk)
		low.Mod(low, t)
		if halve != 0 {
			low.Rsh(low, 1)
		}
		words := low.Bits()
		for w := 0; w < int(limbs); w++ {
			var v uint64
			if w < len(words) {
				v = uint64(words[w])
			}
			dst[i*int(limbs)+w] = v
		}
		if len(words) > int(limbs) {
			fail(codeArgument, "value exceeds %d limbs", limbs)
		}
	}
	*noise = 0
	if maxEps.Sign() > 0 {
		f, _ := new(big.Float).SetInt(maxEps).Float64()
		*noise = C.double(math.Log2(f))
	}
	return codeOK
}

// crisp_pt_montgomery: the Montgomery form of a plaintext (PT.montgomery), computed now.
// The server makes its weight plaintexts offline; the products (crisp_mul_blocks) read
// this form, which they would otherwise compute at their first use, online.
//
//export crisp_pt_montgomery
func crisp_pt_montgomery(ph C.uint64_t, pth C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	getPT(ph, pth).montgomery(params(ph).P)
	return codeOK
}

// crisp_mul_blocks multiplies one client ciphertext into the accumulators of every output
// block of a row group: acc_b = ct * pt_b (first: new ciphertexts, handles written to
// accs) or acc_b += ct * pt_b, with the plaintexts' cached Montgomery forms (fastops.go),
// the blocks spread over goroutines (one per core, at most the block count).
//
//export crisp_mul_blocks
func crisp_mul_blocks(ph C.uint64_t, cth C.uint64_t, pts *C.uint64_t, n C.int, accs *C.uint64_t, first C.int, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	ct := getCT(ph, cth)
	if n < 1 || ct.v.Degree() != 1 || !ct.v.IsNTT {
		fail(codeArgument, "block product needs blocks and a degree-1 NTT ciphertext")
	}
	level := ct.v.Level()
	ph64 := u64s(pts, int(n))
	ah := u64s(accs, int(n))
	ps := make([]*PT, int(n))
	out := make([]*rlwe.Ciphertext, int(n))
	for b := range ps {
		ps[b] = getPT(ph, C.uint64_t(ph64[b]))
		if ps[b].v.Level() < level || !ps[b].v.IsNTT || ps[b].v.IsBatched != ct.v.IsBatched {
			fail(codeArgument, "block %d: plaintext level, domain or encoding does not fit", b)
		}
		if first == 0 {
			a := getCT(ph, C.uint64_t(ah[b]))
			if a.v.Level() != level || a.v.Degree() != 1 || a.v.Scale.Cmp(ct.v.Scale.Mul(ps[b].v.Scale)) != 0 {
				fail(codeArgument, "block %d: accumulator level, degree or scale does not fit", b)
			}
			out[b] = a.v
		} else {
			c := rlwe.NewCiphertext(P, 1, level)
			*c.MetaData = *ct.v.MetaData
			c.Scale = ct.v.Scale.Mul(ps[b].v.Scale)
			out[b] = c
		}
		ps[b].montgomery(P) // computed here, once, not inside the workers
	}
	r := P.RingQ().AtLevel(level)
	workers := runtime.GOMAXPROCS(0)
	if workers > int(n) {
		workers = int(n)
	}
	var next int64
	var wg sync.WaitGroup
	panics := make([]any, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			defer func() { panics[w] = recover() }()
			for {
				b := int(atomic.AddInt64(&next, 1) - 1)
				if b >= int(n) {
					return
				}
				m := ps[b].mont
				for i := 0; i < 2; i++ {
					if first != 0 {
						r.MulCoeffsMontgomery(m, ct.v.Value[i], out[b].Value[i])
					} else {
						r.MulCoeffsMontgomeryThenAdd(ct.v.Value[i], m, out[b].Value[i])
					}
				}
			}
		}(w)
	}
	wg.Wait()
	for _, p := range panics {
		if p != nil {
			panic(p)
		}
	}
	if first != 0 {
		for b := range out {
			ah[b] = uint64(put(&CT{ph: uint64(ph), v: out[b]}))
		}
	}
	return codeOK
}
