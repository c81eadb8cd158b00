package he

import (
	"math"
	"sync"

	"github.com/tuneinsight/lattigo/v6/core/rlwe"
	"github.com/tuneinsight/lattigo/v6/ring"
	"github.com/tuneinsight/lattigo/v6/schemes/ckks"
	"github.com/tuneinsight/lattigo/v6/utils"

	"secinfer/native/internal/status"
)

// Fast paths for the per-call-cheap operations (ciphertext x plaintext, add) and
// into-destination variants, so a protocol's multiply-accumulate loop does not pay for
// allocating and zeroing a fresh output ciphertext on every call.
//
// Measured with `go test -bench . ` in native/go (N = 2^13, three RNS limbs): allocating
// a degree-1 output costs ~140-175 us (page faults on fresh memory plus GC), the
// plaintext's conversion to Montgomery form inside Lattigo's Mul ~60-80 us, and the
// coefficient-wise products themselves ~35 us per ciphertext component.

// ScaleLog2 is log2 of a scale in float64 arithmetic. Lattigo's Scale.Log2 evaluates a
// 128-bit big.Float logarithm (~100 us per call, which made every `ct.level` from
// Python cost that much); scales are far below 2^1023, where float64 is exact to 2^-52
// relative, i.e. ~1e-16 in the logarithm.
func ScaleLog2(s rlwe.Scale) float64 {
	f, _ := s.Value.Float64()
	if f > 0 && !math.IsInf(f, 0) {
		return math.Log2(f)
	}
	return s.Log2()
}

// Montgomery returns pt's polynomial in Montgomery form (callers cache it: plaintexts are
// immutable after creation).
func Montgomery(P ckks.Parameters, pt *rlwe.Plaintext) ring.Poly {
	r := P.RingQ().AtLevel(pt.Level())
	m := r.NewPoly()
	r.MForm(pt.Value, m)
	return m
}

// MulPlain computes out = a * pt, or out += a * pt when accumulate is set, with m the
// plaintext's Montgomery form; the result is bit-identical to Lattigo's Mul / MulThenAdd
// (same metadata updates, same level rule: min of the operands' levels, and of out's level
// when accumulating). out may be a (not when accumulating). Returns false for the cases it
// does not handle (domain or batching mismatch, an accumulator whose scale differs from
// a.Scale * pt.Scale); the caller then uses Lattigo, which reports or handles them.
func MulPlain(P ckks.Parameters, a *rlwe.Ciphertext, pv *rlwe.Plaintext, m func() ring.Poly, out *rlwe.Ciphertext, accumulate bool) bool {
	if a.Degree() < 1 || a.MetaData == nil || pv.MetaData == nil || out.MetaData == nil {
		return false
	}
	if a.IsNTT != P.NTTFlag() || pv.IsNTT != a.IsNTT || pv.IsBatched != a.IsBatched {
		return false
	}
	level := utils.Min(a.Level(), pv.Level())
	scale := a.Scale.Mul(pv.Scale)
	if accumulate {
		if out == a {
			status.Fail(status.Argument, "the accumulator must be a different ciphertext than the factor")
		}
		if out.Scale.Cmp(scale) != 0 {
			return false
		}
		level = utils.Min(level, out.Level())
		out.Resize(utils.Max(a.Degree(), out.Degree()), level)
	} else {
		out.Resize(a.Degree(), level)
		out.Scale = scale
	}
	out.IsNTT = a.IsNTT
	out.IsBatched = a.IsBatched
	out.LogDimensions.Rows = utils.Max(a.LogDimensions.Rows, pv.LogDimensions.Rows)
	out.LogDimensions.Cols = utils.Max(a.LogDimensions.Cols, pv.LogDimensions.Cols)
	mp := m()
	r := P.RingQ().AtLevel(level)
	for i := 0; i <= a.Degree(); i++ {
		if accumulate {
			r.MulCoeffsMontgomeryThenAdd(a.Value[i], mp, out.Value[i])
		} else {
			r.MulCoeffsMontgomery(mp, a.Value[i], out.Value[i])
		}
	}
	return true
}

// ---------------------------------------------------------------- output buffer pool
//
// Freshly allocated outputs cost more than the arithmetic of an add or a
// plaintext product (fresh pages fault in, the GC runs more often). Outputs of the
// allocating add / sub / ciphertext x plaintext come from a small pool of buffers that
// freed ciphertexts of the same shape give back (he_free_handle). Only ciphertexts
// created here are recycled, only if they still own exactly the buffers they were
// created with, and only into operations that overwrite every coefficient of the output
// (so stale contents never leak into a result). The pool holds at most poolCapBytes.

type shapeKey struct{ n, degree, level int }

const poolCapBytes = 32 << 20

var (
	poolMu    sync.Mutex
	ctPool    = map[shapeKey][][]ring.Poly{}
	poolBytes int
)

func (k shapeKey) bytes() int { return 8 * k.n * (k.level + 1) * (k.degree + 1) }

// PoolRef remembers the buffers a pooled ciphertext was created with.
type PoolRef struct {
	key   shapeKey
	polys []ring.Poly
}

// PooledCT returns a ciphertext of the given shape with the metadata of
// ckks.NewCiphertext and arbitrary coefficients; the caller overwrites all of them.
func PooledCT(P ckks.Parameters, degree, level int) (*rlwe.Ciphertext, *PoolRef) {
	key := shapeKey{P.N(), degree, level}
	var polys []ring.Poly
	poolMu.Lock()
	if l := ctPool[key]; len(l) > 0 {
		polys = l[len(l)-1]
		l[len(l)-1] = nil
		ctPool[key] = l[:len(l)-1]
		poolBytes -= key.bytes()
	}
	poolMu.Unlock()
	var ct *rlwe.Ciphertext
	if polys == nil {
		ct = ckks.NewCiphertext(P, degree, level)
		polys = append([]ring.Poly(nil), ct.Value...)
	} else {
		ct = &rlwe.Ciphertext{Element: rlwe.Element[ring.Poly]{
			Value:    append([]ring.Poly(nil), polys...),
			MetaData: &rlwe.MetaData{CiphertextMetaData: rlwe.CiphertextMetaData{IsNTT: P.NTTFlag()}},
		}}
		ct.IsBatched = true
		ct.Scale = P.DefaultScale()
		ct.LogDimensions = P.LogMaxDimensions()
	}
	return ct, &PoolRef{key: key, polys: polys}
}

// Recycle gives a freed ciphertext's buffers back to the pool if it still owns exactly
// them (same shape, same backing arrays); called with its handle already removed.
func Recycle(ct *rlwe.Ciphertext, r *PoolRef) {
	if r == nil || ct == nil || len(ct.Value) != len(r.polys) {
		return
	}
	for i, p := range ct.Value {
		q := r.polys[i]
		if p.Level() != r.key.level || len(p.Coeffs) != len(q.Coeffs) {
			return
		}
		for j := range p.Coeffs {
			if len(p.Coeffs[j]) != r.key.n || &p.Coeffs[j][0] != &q.Coeffs[j][0] {
				return
			}
		}
	}
	poolMu.Lock()
	defer poolMu.Unlock()
	if poolBytes+r.key.bytes() > poolCapBytes {
		return
	}
	ctPool[r.key] = append(ctPool[r.key], r.polys)
	poolBytes += r.key.bytes()
}
