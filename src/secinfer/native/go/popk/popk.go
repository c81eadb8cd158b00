// Package popk holds the linear maps and transcript hashes of crisp's zero-knowledge proofs
// over Lattigo rings (secinfer.crypto.zk.popk and .keyproof): the proof of plaintext
// knowledge of an RLWE encryption (this file) and the proof that a public key is well
// formed (keyproof.go). It has no cgo: the exports (package main, popk_export.go) convert
// C arguments, resolve handles and call in here.
package popk

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
	"github.com/tuneinsight/lattigo/v6/schemes/ckks"

	"secinfer/native/internal/status"
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

const LimbBits = 40

// hostLittleEndian: uint64 residues are already little-endian in memory (amd64, arm64).
var hostLittleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// Poly writes (add = false) or adds (add = true) scale * sum_l src[l] 2^(40 l) mod
// every prime of r into dst (scale nil: 1). Limbs below 2q (all but huge top limbs) are
// reduced by a branch-free conditional subtraction, the rest by Barrett; the limb weight
// (times the scale) is one Barrett product, skipped when it is 1. (q < 2^61, so every
// intermediate below fits a signed 64-bit comparison.)
func Poly(r *ring.Ring, src []int64, L, N int, scale *big.Int, add bool, dst ring.Poly) {
	for i, s := range r.SubRings[:r.Level()+1] {
		q, bred := s.Modulus, s.BRedConstant
		qb := new(big.Int).SetUint64(q)
		twoQ := 2 * q
		out := dst.Coeffs[i]
		for l := 0; l < L; l++ {
			pw := new(big.Int).Lsh(big.NewInt(1), uint(LimbBits*l))
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

// HashRows returns SHA-256(tag || hdr || d_0 || .. || d_(rows-1)) where d_k is the
// SHA-256 of the residues of every polynomial image(k) returns. Rows are independent:
// a pool of one worker per CPU (Lattigo's ring operations are pure functions of their
// arguments) takes rows one at a time, evaluates and hashes them, so neither the
// evaluation nor the hashing waits for a whole block, and only one row per worker is
// held in memory.
func HashRows(r *ring.Ring, rows int, tag string, hdr []byte, image func(k int) []ring.Poly) []byte {
	return HashRowsScratch(r, rows, tag, hdr, -1, func(k int, _ *[5]ring.Poly) []ring.Poly { return image(k) })
}

// HashRowsScratch is HashRows without residue row `skip` of every polynomial (the
// rounding prime's row, zero after Round; -1: none) and with five scratch polynomials per worker,
// passed to every image call of that worker (allocated on its first row; an image must
// overwrite what it uses: the same buffers serve the worker's next row once this row is
// hashed).
func HashRowsScratch(r *ring.Ring, rows int, tag string, hdr []byte, skip int, image func(k int, scr *[5]ring.Poly) []ring.Poly) []byte {
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

// Image returns f(z) for one argument z (layout above) as coefficient-domain
// residues, each component minus sum_j c_j ct_j with the challenge c_j = coef(j) in
// {0, 1, -1, i, -i} coded 0..4, i = X^(N/2) (cts in the NTT domain; coef nil: none): one
// NTT (u), two fused products, the ciphertexts with c_j = +-1 subtracted / added in the
// NTT domain, those with c_j = +-i summed apart and subtracted after one pointwise
// product by mono (X^(N/2) in NTT and Montgomery form, see Mono), two inverse NTTs,
// then Delta m + e0 and e1 added coefficient-wise. The results are written into scr[0]
// (c0) and scr[2] (c1), with scr[1], scr[3], scr[4] as work space, every coefficient
// overwritten (scr nil: fresh polynomials).
func Image(r *ring.Ring, pk *rlwe.PublicKey, delta *big.Int, ls [4]int, z []int64, N int, cts []*rlwe.Ciphertext, coef func(j int) byte, mono ring.Poly, scr *[5]ring.Poly) (ring.Poly, ring.Poly) {
	o1, o2, o3 := ls[0]*N, (ls[0]+ls[1])*N, (ls[0]+ls[1]+ls[2])*N
	if scr == nil {
		scr = &[5]ring.Poly{r.NewPoly(), r.NewPoly(), r.NewPoly(), r.NewPoly(), r.NewPoly()}
	}
	c0, u, c1, b0, b1 := scr[0], scr[1], scr[2], scr[3], scr[4]
	Poly(r, z[o1:o2], ls[1], N, nil, false, u)
	r.NTT(u, u)
	// pk is stored in NTT and Montgomery form: the Montgomery product gives pk*u in NTT.
	r.MulCoeffsMontgomery(u, pk.Value[0].Q, c0)
	r.MulCoeffsMontgomery(u, pk.Value[1].Q, c1)
	rot := false
	for j, ct := range cts {
		switch c := coef(j); c {
		case 1:
			r.Sub(c0, ct.Value[0], c0)
			r.Sub(c1, ct.Value[1], c1)
		case 2:
			r.Add(c0, ct.Value[0], c0)
			r.Add(c1, ct.Value[1], c1)
		case 3, 4:
			if !rot {
				b0.Zero()
				b1.Zero()
				rot = true
			}
			if c == 3 {
				r.Add(b0, ct.Value[0], b0)
				r.Add(b1, ct.Value[1], b1)
			} else {
				r.Sub(b0, ct.Value[0], b0)
				r.Sub(b1, ct.Value[1], b1)
			}
		}
	}
	if rot {
		r.MulCoeffsMontgomeryThenSub(b0, mono, c0)
		r.MulCoeffsMontgomeryThenSub(b1, mono, c1)
	}
	r.INTT(c0, c0)
	r.INTT(c1, c1)
	Poly(r, z[:o1], ls[0], N, delta, true, c0)
	Poly(r, z[o2:o3], ls[2], N, nil, true, c0)
	Poly(r, z[o3:o3+ls[3]*N], ls[3], N, nil, true, c1)
	return c0, c1
}

// Mono returns X^(N/2) (the imaginary unit i of the challenge set) at r's level in
// the NTT domain and Montgomery form, ready for MulCoeffsMontgomery.
func Mono(r *ring.Ring) ring.Poly {
	mono := r.NewPoly()
	for i := 0; i <= r.Level(); i++ {
		mono.Coeffs[i][r.N()/2] = 1
	}
	r.NTT(mono, mono)
	r.MForm(mono, mono)
	return mono
}

// Round replaces a coefficient-domain polynomial c (residues at every prime of r) by
// a bijective image of its high part with respect to the prime of index rp: with X in
// [0, Q) the integer of a coefficient, low = X mod q_rp (written to low when it is not
// nil) and H = (X - low) / q_rp < Q / q_rp, row i != rp becomes (x_i - low) mod q_i =
// q_rp H mod q_i, which determines H mod q_i (q_rp is invertible mod q_i), so the rows
// together determine H; row rp is zeroed (the hash skips it). H(X) = H(X') implies
// |X - X'| < q_rp, and H(X) = H(X + d) whenever low lies in [|d|, q_rp - |d|): the
// rounding of the proof's e0 and e1 components (popk.py).
func Round(r *ring.Ring, c ring.Poly, rp int, low []uint64) {
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

// ParseDelta reads Delta, a positive integer of 1..256 little-endian bytes.
func ParseDelta(le []byte) *big.Int {
	be := make([]byte, len(le))
	for i, b := range le {
		be[len(le)-1-i] = b
	}
	d := new(big.Int).SetBytes(be)
	if d.Sign() == 0 {
		status.Fail(status.Argument, "Delta must be positive")
	}
	return d
}

// Hash hashes, for k = 0..rows-1,  A_k = f(z_k) - sum_j chal[k][j] cts_j  with SHA-256
// (32 bytes), both components as coefficient residues (see he_popk_hash for the
// arguments; dle is Delta's little-endian bytes, rp the rounding prime or < 0, lows nil
// or rows x 2 x N).
func Hash(r *ring.Ring, pk *rlwe.PublicKey, dv *big.Int, dle []byte, ls [4]int, rows int, zs []int64, cts []*rlwe.Ciphertext, ch []byte, rp int, lows []uint64) []byte {
	N := r.N()
	per := (ls[0] + ls[1] + ls[2] + ls[3]) * N
	for _, b := range ch {
		if b > 4 {
			status.Fail(status.Argument, "challenge entries must be in 0..4")
		}
	}
	mono := Mono(r)
	hdr := make([]byte, 16, 16+len(dle))
	binary.LittleEndian.PutUint32(hdr[0:], uint32(r.Level()))
	binary.LittleEndian.PutUint32(hdr[4:], uint32(rows))
	binary.LittleEndian.PutUint32(hdr[8:], uint32(len(dle)))
	binary.LittleEndian.PutUint32(hdr[12:], uint32(int32(rp)))
	hdr = append(hdr, dle...)
	return HashRowsScratch(r, rows, "secinfer/crisp-popk/v4", hdr, rp, func(k int, scr *[5]ring.Poly) []ring.Poly {
		c0, c1 := Image(r, pk, dv, ls, zs[k*per:(k+1)*per], N, cts,
			func(j int) byte { return ch[k*len(cts)+j] }, mono, scr)
		if rp > 0 {
			var l0, l1 []uint64
			if lows != nil {
				l0, l1 = lows[2*k*N:(2*k+1)*N], lows[(2*k+1)*N:(2*k+2)*N]
			}
			Round(r, c0, rp, l0)
			Round(r, c1, rp, l1)
		}
		return []ring.Poly{c0, c1}
	})
}

// ResiduesInto copies the rows of every polynomial of ps, one after the other, into dst.
func ResiduesInto(r *ring.Ring, dst []uint64, ps ...ring.Poly) {
	L, N := r.Level()+1, r.N()
	for c, p := range ps {
		for l := 0; l < L; l++ {
			copy(dst[(c*L+l)*N:(c*L+l+1)*N], p.Coeffs[l])
		}
	}
}

// EncodeLimbs makes the plaintext with coefficients scale a_j + b_j at level (NTT
// domain, scale metadata 2^logScale, not batched) from signed multi-limb integers a (la
// limbs of N int64) and b (lb limbs), x_j = sum_l limb[l][j] 2^(40 l), exactly (Poly).
func EncodeLimbs(P ckks.Parameters, level, logScale int, scale *big.Int, a []int64, la int, b []int64, lb int) *rlwe.Plaintext {
	r := P.RingQ().AtLevel(level)
	N := P.N()
	pt := rlwe.NewPlaintext(P, level)
	if scale == nil {
		scale = new(big.Int).Lsh(big.NewInt(1), uint(logScale))
	}
	Poly(r, a, la, N, scale, false, pt.Value)
	Poly(r, b, lb, N, nil, true, pt.Value)
	pt.Scale = rlwe.NewScale(math.Ldexp(1, logScale))
	pt.IsBatched = false
	if pt.IsNTT {
		r.NTT(pt.Value, pt.Value)
	}
	return pt
}
