package main

/*
#include <stdint.h>
#include <stdlib.h>
*/
import "C"

import (
	"crypto/sha256"
	"encoding/binary"
	"math"
	"math/big"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/tuneinsight/lattigo/v6/core/rlwe"
	"github.com/tuneinsight/lattigo/v6/ring"
)

// The linear map of an RLWE public-key encryption with *arbitrary* (not only in-bound)
// arguments, for the proof of plaintext knowledge of crisp (secinfer.crypto.zk.popk):
//
//	f(m, u, e0, e1) = (pk0 u + e0 + Delta m,  pk1 u + e1)   in R_Q at `level`
//
// exactly the equation of he_encrypt_rand, for any public integer Delta (crisp: the inverse
// of the plaintext modulus mod Q, docs/protocols/crisp.md). Arguments cross as signed multi-limb integer
// vectors: component x is L_x rows of N int64 limbs, x_j = sum_l limb[l][j] 2^(40 l), so
// values far beyond int64 (masked responses of ~100 bits) are exact. Components are laid
// out m, u, e0, e1, one after the other.

const popkLimbBits = 40

// hostLittleEndian: uint64 residues are already little-endian in memory (amd64, arm64).
var hostLittleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// popkPoly writes (add = false) or adds (add = true) scale * sum_l src[l] 2^(40 l) mod
// every prime of r into dst (scale nil: 1). Limbs below 2q (all but huge top limbs) are
// reduced by a branch-free conditional subtraction, the rest by Barrett; the limb weight
// (times the scale) is one Barrett product, skipped when it is 1. (q < 2^61, so every
// intermediate below fits a signed 64-bit comparison.)
func popkPoly(r *ring.Ring, src []int64, L, N int, scale *big.Int, add bool, dst ring.Poly) {
	for i, s := range r.SubRings[:r.Level()+1] {
		q, bred := s.Modulus, s.BRedConstant
		qb := new(big.Int).SetUint64(q)
		twoQ := 2 * q
		out := dst.Coeffs[i]
		for l := 0; l < L; l++ {
			pw := new(big.Int).Lsh(big.NewInt(1), uint(popkLimbBits*l))
			if scale != nil {
				pw.Mul(pw, scale)
			}
			w := pw.Mod(pw, qb).Uint64()
			one := w == 1
			set := l == 0 && !add
			row := src[l*N : (l+1)*N]
			for j, v := range row {
				if v == 0 { // m off its support: long runs of zeros (a well-predicted branch)
					if set {
						out[j] = 0
					}
					continue
				}
				// branch-free |v| mod q and sign (values are random: branches mispredict)
				neg := uint64(v >> 63)
				x := (uint64(v) ^ neg) - neg
				if x >= twoQ { // rare: only huge top limbs
					x = ring.BRedAdd(x, q, bred)
				}
				d := x - q
				x = d + (q & uint64(int64(d)>>63))
				y := (x &^ neg) | ((q - x) & neg) // q - x when negative (q when x = 0: fixed below)
				d = y - q
				x = d + (q & uint64(int64(d)>>63))
				if !one {
					x = ring.BRed(x, w, q, bred)
				}
				if set {
					out[j] = x
					continue
				}
				d = out[j] + x - q
				out[j] = d + (q & uint64(int64(d)>>63))
			}
		}
	}
}

// popkHashRows returns SHA-256(tag || hdr || d_0 || .. || d_(rows-1)) where d_k is the
// SHA-256 of the residues of every polynomial image(k) returns. Rows are independent:
// a pool of one worker per CPU (Lattigo's ring operations are pure functions of their
// arguments) takes rows one at a time, evaluates and hashes them, so neither the
// evaluation nor the hashing waits for a whole block, and only one row per worker is
// held in memory.
func popkHashRows(r *ring.Ring, rows int, tag string, hdr []byte, image func(k int) []ring.Poly) []byte {
	return popkHashRowsSkip(r, rows, tag, hdr, -1, image)
}

// popkHashRowsSkip is popkHashRows without residue row `skip` of every polynomial (the
// rounding prime's row, zero after popkRound; -1: none).
func popkHashRowsSkip(r *ring.Ring, rows int, tag string, hdr []byte, skip int, image func(k int) []ring.Poly) []byte {
	return popkHashRowsScratch(r, rows, tag, hdr, skip, func(k int, _ *[5]ring.Poly) []ring.Poly { return image(k) })
}

// popkHashRowsScratch is popkHashRowsSkip with five scratch polynomials per worker,
// passed to every image call of that worker (allocated on its first row; an image must
// overwrite what it uses: the same buffers serve the worker's next row once this row is
// hashed).
func popkHashRowsScratch(r *ring.Ring, rows int, tag string, hdr []byte, skip int, image func(k int, scr *[5]ring.Poly) []ring.Poly) []byte {
	digests := make([][sha256.Size]byte, rows)
	panics := make([]any, rows)
	workers := runtime.NumCPU()
	if workers > 4 {
		workers = 4
	}
	if workers > rows {
		workers = rows
	}
	var next int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 8*r.N())
			var scr [5]ring.Poly
			for i := range scr {
				scr[i] = r.NewPoly()
			}
			for {
				k := int(atomic.AddInt64(&next, 1) - 1)
				if k >= rows {
					return
				}
				func() {
					defer func() { panics[k] = recover() }()
					h := sha256.New()
					for _, p := range image(k, &scr) {
						for l := 0; l <= r.Level(); l++ {
							if l == skip {
								continue
							}
							row := p.Coeffs[l]
							if hostLittleEndian { // the same bytes, without the copy
								h.Write(unsafe.Slice((*byte)(unsafe.Pointer(&row[0])), 8*len(row)))
								continue
							}
							for j, c := range row {
								binary.LittleEndian.PutUint64(buf[8*j:], c)
							}
							h.Write(buf)
						}
					}
					h.Sum(digests[k][:0])
				}()
			}
		}()
	}
	wg.Wait()
	for _, p := range panics {
		if p != nil {
			panic(p)
		}
	}
	hsh := sha256.New()
	hsh.Write([]byte(tag))
	hsh.Write(hdr)
	for k := range digests {
		hsh.Write(digests[k][:])
	}
	return hsh.Sum(nil)
}

// popkImage returns f(z) for one argument z (layout above) as coefficient-domain
// residues, each component minus sum_j c_j ct_j with the challenge c_j = coef(j) in
// {0, 1, -1, i, -i} coded 0..4, i = X^(N/2) (cts in the NTT domain; coef nil: none): one
// NTT (u), two fused products, the ciphertexts with c_j = +-1 subtracted / added in the
// NTT domain, those with c_j = +-i summed apart and subtracted after one pointwise
// product by mono (X^(N/2) in NTT and Montgomery form, see popkMono), two inverse NTTs,
// then Delta m + e0 and e1 added coefficient-wise. The results are written into scr[0]
// (c0) and scr[2] (c1), with scr[1], scr[3], scr[4] as work space, every coefficient
// overwritten (scr nil: fresh polynomials).
func popkImage(r *ring.Ring, pk *PK, delta *big.Int, ls [4]int, z []int64, N int, cts []*CT, coef func(j int) byte, mono ring.Poly, scr *[5]ring.Poly) (ring.Poly, ring.Poly) {
	o1, o2, o3 := ls[0]*N, (ls[0]+ls[1])*N, (ls[0]+ls[1]+ls[2])*N
	if scr == nil {
		scr = &[5]ring.Poly{r.NewPoly(), r.NewPoly(), r.NewPoly(), r.NewPoly(), r.NewPoly()}
	}
	c0, u, c1, b0, b1 := scr[0], scr[1], scr[2], scr[3], scr[4]
	popkPoly(r, z[o1:o2], ls[1], N, nil, false, u)
	r.NTT(u, u)
	// pk is stored in NTT and Montgomery form: the Montgomery product gives pk*u in NTT.
	r.MulCoeffsMontgomery(u, pk.v.Value[0].Q, c0)
	r.MulCoeffsMontgomery(u, pk.v.Value[1].Q, c1)
	rot := false
	for j, ct := range cts {
		switch c := coef(j); c {
		case 1:
			r.Sub(c0, ct.v.Value[0], c0)
			r.Sub(c1, ct.v.Value[1], c1)
		case 2:
			r.Add(c0, ct.v.Value[0], c0)
			r.Add(c1, ct.v.Value[1], c1)
		case 3, 4:
			if !rot {
				b0.Zero()
				b1.Zero()
				rot = true
			}
			if c == 3 {
				r.Add(b0, ct.v.Value[0], b0)
				r.Add(b1, ct.v.Value[1], b1)
			} else {
				r.Sub(b0, ct.v.Value[0], b0)
				r.Sub(b1, ct.v.Value[1], b1)
			}
		}
	}
	if rot {
		r.MulCoeffsMontgomeryThenSub(b0, mono, c0)
		r.MulCoeffsMontgomeryThenSub(b1, mono, c1)
	}
	r.INTT(c0, c0)
	r.INTT(c1, c1)
	popkPoly(r, z[:o1], ls[0], N, delta, true, c0)
	popkPoly(r, z[o2:o3], ls[2], N, nil, true, c0)
	popkPoly(r, z[o3:o3+ls[3]*N], ls[3], N, nil, true, c1)
	return c0, c1
}

// popkMono returns X^(N/2) (the imaginary unit i of the challenge set) at r's level in
// the NTT domain and Montgomery form, ready for MulCoeffsMontgomery.
func popkMono(r *ring.Ring) ring.Poly {
	mono := r.NewPoly()
	for i := 0; i <= r.Level(); i++ {
		mono.Coeffs[i][r.N()/2] = 1
	}
	r.NTT(mono, mono)
	r.MForm(mono, mono)
	return mono
}

// popkRound replaces a coefficient-domain polynomial c (residues at every prime of r) by
// a bijective image of its high part with respect to the prime of index rp: with X in
// [0, Q) the integer of a coefficient, low = X mod q_rp (written to low when it is not
// nil) and H = (X - low) / q_rp < Q / q_rp, row i != rp becomes (x_i - low) mod q_i =
// q_rp H mod q_i, which determines H mod q_i (q_rp is invertible mod q_i), so the rows
// together determine H; row rp is zeroed (the hash skips it). H(X) = H(X') implies
// |X - X'| < q_rp, and H(X) = H(X + d) whenever low lies in [|d|, q_rp - |d|): the
// rounding of the proof's e0 and e1 components (popk.py).
func popkRound(r *ring.Ring, c ring.Poly, rp int, low []uint64) {
	lows := c.Coeffs[rp]
	if low != nil {
		copy(low, lows)
	}
	for i, s := range r.SubRings[:r.Level()+1] {
		if i == rp {
			continue
		}
		q, bred := s.Modulus, s.BRedConstant
		row := c.Coeffs[i]
		for j, lo := range lows {
			if lo >= q { // never when q_rp is the smallest prime (popk.round_prime)
				lo = ring.BRedAdd(lo, q, bred)
			}
			d := row[j] - lo // branch-free (x_i - lo) mod q_i
			row[j] = d + (q & uint64(int64(d)>>63))
		}
	}
	clear(lows)
}

// popkDelta reads Delta, a positive integer of dlen little-endian bytes (at most 256).
func popkDelta(delta *C.uchar, dlen C.int) (*big.Int, []byte) {
	if dlen < 1 || dlen > 256 {
		fail(codeArgument, "Delta must have 1..256 bytes, got %d", dlen)
	}
	le := inBytes(delta, C.size_t(dlen))
	be := make([]byte, len(le))
	for i, b := range le {
		be[len(le)-1-i] = b
	}
	d := new(big.Int).SetBytes(be)
	if d.Sign() == 0 {
		fail(codeArgument, "Delta must be positive")
	}
	return d, le
}

func popkArgs(ph, pkh C.uint64_t, level C.int, limbs *C.int64_t) (*ring.Ring, *PK, [4]int, int) {
	P := params(ph).P
	pk := get[*PK](uint64(pkh), "public key")
	bound(uint64(ph), pk.ph, "public key")
	if int(level) < 0 || int(level) > P.MaxLevel() {
		fail(codeArgument, "level %d out of range", level)
	}
	var ls [4]int
	for i, v := range i64s(limbs, 4) {
		if (v < 1 && i < 2) || v < 0 || v > 8 { // e0, e1 may be absent (rounded proofs)
			fail(codeArgument, "component %d: limb count %d not in 1..8", i, v)
		}
		ls[i] = int(v)
	}
	return P.RingQ().AtLevel(int(level)), pk, ls, P.N()
}

// he_popk_hash hashes, for k = 0..rows-1,  A_k = f(z_k) - sum_j chal[k][j] ct_j  with
// SHA-256 into out (32 bytes), both components as coefficient residues. The prover calls
// it with nct = 0 on its masks y_k (A_k = f(y_k)), the verifier with the responses z_k,
// the client's ciphertexts and the challenge (entries 0..4 for 0, 1, -1, X^(N/2),
// -X^(N/2), popk.challenge); an honest transcript gives equal
// digests. roundPrime >= 1: both components are hashed through popkRound with that prime
// (exactly their high parts; the e0 and e1 limbs are then usually absent), and low, if
// not null, receives the rows x 2 x N low residues (c0's, then c1's, per row: the
// prover's band check); roundPrime < 0: exact.
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
	ctv := make([]*CT, len(hs))
	for j, h := range hs {
		ct := getCT(ph, C.uint64_t(h))
		if ct.v.Degree() != 1 || ct.v.Level() != int(level) || !ct.v.IsNTT {
			fail(codeArgument, "ciphertext %d: need degree 1, level %d, NTT domain", j, level)
		}
		ctv[j] = ct
	}
	for _, b := range ch {
		if b > 4 {
			fail(codeArgument, "challenge entries must be in 0..4")
		}
	}
	mono := popkMono(r)
	hdr := make([]byte, 16, 16+len(dle))
	binary.LittleEndian.PutUint32(hdr[0:], uint32(level))
	binary.LittleEndian.PutUint32(hdr[4:], uint32(rows))
	binary.LittleEndian.PutUint32(hdr[8:], uint32(len(dle)))
	binary.LittleEndian.PutUint32(hdr[12:], uint32(int32(rp)))
	hdr = append(hdr, dle...)
	sum := popkHashRowsScratch(r, int(rows), "secinfer/crisp-popk/v4", hdr, rp, func(k int, scr *[5]ring.Poly) []ring.Poly {
		c0, c1 := popkImage(r, pk, dv, ls, zs[k*per:(k+1)*per], N, ctv,
			func(j int) byte { return ch[k*len(ctv)+j] }, mono, scr)
		if rp > 0 {
			var l0, l1 []uint64
			if lows != nil {
				l0, l1 = lows[2*k*N:(2*k+1)*N], lows[(2*k+1)*N:(2*k+2)*N]
			}
			popkRound(r, c0, rp, l0)
			popkRound(r, c1, rp, l1)
		}
		return []ring.Poly{c0, c1}
	})
	copy(unsafe.Slice((*byte)(unsafe.Pointer(out)), 32), sum)
	return codeOK
}

// he_popk_image writes f(z) for one argument z as coefficient-domain residues:
// out[c][l][j], c in {0, 1}, l = 0..level (tests compare it with he_encrypt_rand and with
// big-integer arithmetic).
//
//export he_popk_image
func he_popk_image(ph, pkh C.uint64_t, level C.int, delta *C.uchar, dlen C.int, limbs *C.int64_t, z *C.int64_t, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	r, pk, ls, N := popkArgs(ph, pkh, level, limbs)
	dv, _ := popkDelta(delta, dlen)
	zs := i64s(z, (ls[0]+ls[1]+ls[2]+ls[3])*N)
	c0, c1 := popkImage(r, pk, dv, ls, zs, N, nil, nil, ring.Poly{}, nil)
	L := r.Level() + 1
	dst := u64s(out, 2*L*N)
	for c, p := range []ring.Poly{c0, c1} {
		for l := 0; l < L; l++ {
			copy(dst[(c*L+l)*N:(c*L+l+1)*N], p.Coeffs[l])
		}
	}
	return codeOK
}

// he_encode_limbs makes the plaintext with coefficients Delta a_j + b_j at `level`
// (NTT domain, scale metadata 2^logScale, not batched; Delta = 2^logScale when dlen = 0,
// else the integer of dlen little-endian bytes at delta) from signed multi-limb integers a (la limbs
// of N int64) and b (lb limbs), x_j = sum_l limb[l][j] 2^(40 l), exactly (popkPoly): the
// coefficient encoding of values far beyond float64, e.g. crisp's mask plaintexts
// -Delta R + F of ~300 bits in one call.
//
//export he_encode_limbs
func he_encode_limbs(ph C.uint64_t, level, logScale C.int, delta *C.uchar, dlen C.int, la C.int, a *C.int64_t, lb C.int, b *C.int64_t, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	if int(level) < 0 || int(level) > P.MaxLevel() {
		fail(codeArgument, "level %d out of range", level)
	}
	if logScale < 0 || logScale > 1000 || la < 1 || la > 8 || lb < 1 || lb > 8 {
		fail(codeArgument, "logScale must be 0..1000 and the limb counts 1..8")
	}
	r := P.RingQ().AtLevel(int(level))
	N := P.N()
	pt := rlwe.NewPlaintext(P, int(level))
	scale := new(big.Int).Lsh(big.NewInt(1), uint(logScale))
	if dlen != 0 {
		scale, _ = popkDelta(delta, dlen)
	}
	popkPoly(r, i64s(a, int(la)*N), int(la), N, scale, false, pt.Value)
	popkPoly(r, i64s(b, int(lb)*N), int(lb), N, nil, true, pt.Value)
	pt.Scale = rlwe.NewScale(math.Ldexp(1, int(logScale)))
	pt.IsBatched = false
	if pt.IsNTT {
		r.NTT(pt.Value, pt.Value)
	}
	*out = C.uint64_t(put(&PT{ph: uint64(ph), v: pt}))
	return codeOK
}
