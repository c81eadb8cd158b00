package main

/*
#include <stdint.h>
*/
import "C"

import (
	"math"
	"sync"

	"github.com/tuneinsight/lattigo/v6/core/rlwe"
	"github.com/tuneinsight/lattigo/v6/ring"
	"github.com/tuneinsight/lattigo/v6/schemes/ckks"
	"github.com/tuneinsight/lattigo/v6/utils"
)

// Fast paths for the per-call-cheap operations (ciphertext x plaintext, add) and
// into-destination variants, so a protocol's multiply-accumulate loop does not pay for
// allocating and zeroing a fresh output ciphertext on every call.
//
// Measured with `go test -bench . ` in this folder (N = 2^13, three RNS limbs): allocating
// a degree-1 output costs ~140-175 us (page faults on fresh memory plus GC), the
// plaintext's conversion to Montgomery form inside Lattigo's Mul ~60-80 us, and the
// coefficient-wise products themselves ~35 us per ciphertext component.

// scaleLog2 is log2 of a scale in float64 arithmetic. Lattigo's Scale.Log2 evaluates a
// 128-bit big.Float logarithm (~100 us per call, which made every `ct.level` from
// Python cost that much); scales are far below 2^1023, where float64 is exact to 2^-52
// relative, i.e. ~1e-16 in the logarithm.
func scaleLog2(s rlwe.Scale) float64 {
	f, _ := s.Value.Float64()
	if f > 0 && !math.IsInf(f, 0) {
		return math.Log2(f)
	}
	return s.Log2()
}

// montgomery returns the plaintext in Montgomery form (computed once; plaintexts are
// immutable after creation). Costs one extra polynomial of memory per plaintext that is
// ever multiplied with.
func (p *PT) montgomery(P ckks.Parameters) ring.Poly {
	p.montOnce.Do(func() {
		r := P.RingQ().AtLevel(p.v.Level())
		m := r.NewPoly()
		r.MForm(p.v.Value, m)
		p.mont = m
	})
	return p.mont
}

// mulPlain computes out = a * pt, or out += a * pt when accumulate is set, with the
// plaintext's cached Montgomery form; the result is bit-identical to Lattigo's
// Mul / MulThenAdd (same metadata updates, same level rule: min of the operands'
// levels, and of out's level when accumulating). out may be a (not when accumulating).
// Returns false for the cases it does not handle (domain or batching mismatch, an
// accumulator whose scale differs from a.Scale * pt.Scale); the caller then uses
// Lattigo, which reports or handles them.
func (e *Eval) mulPlain(a *rlwe.Ciphertext, pt *PT, out *rlwe.Ciphertext, accumulate bool) bool {
	P := *e.ev.GetParameters()
	pv := pt.v
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
			fail(codeArgument, "the accumulator must be a different ciphertext than the factor")
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
	m := pt.montgomery(P)
	r := P.RingQ().AtLevel(level)
	for i := 0; i <= a.Degree(); i++ {
		if accumulate {
			r.MulCoeffsMontgomeryThenAdd(a.Value[i], m, out.Value[i])
		} else {
			r.MulCoeffsMontgomery(m, a.Value[i], out.Value[i])
		}
	}
	return true
}

// operand resolves a ciphertext-or-plaintext handle bound to ph.
func operand(ph C.uint64_t, h C.uint64_t) (rlwe.Operand, *PT) {
	switch o := getAny(uint64(h)).(type) {
	case *CT:
		bound(uint64(ph), o.ph, "ciphertext")
		return o.v, nil
	case *PT:
		bound(uint64(ph), o.ph, "plaintext")
		return o.v, o
	default:
		fail(codeArgument, "operand %d is neither ciphertext nor plaintext", h)
	}
	return nil, nil
}

// he_binop_into writes a (op) b into the existing ciphertext outh, which may be a or b:
// op 0 add, 1 sub, 2 mul (no relin), 3 mul+relin, 4 multiply-accumulate out += a*b
// (no relin; out must differ from a and b).
//
//export he_binop_into
func he_binop_into(ph C.uint64_t, evh C.uint64_t, op C.int, ah, bh, outh C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	e := getEval(ph, evh)
	a := getCT(ph, ah)
	b, pt := operand(ph, bh)
	out := getCT(ph, outh)
	if op == 4 && (outh == ah || outh == bh) {
		fail(codeArgument, "the accumulator must be a different ciphertext than the factors")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var err error
	switch op {
	case 0:
		err = e.ev.Add(a.v, b, out.v)
	case 1:
		err = e.ev.Sub(a.v, b, out.v)
	case 2, 3:
		if pt != nil && e.mulPlain(a.v, pt, out.v, false) {
			break
		}
		if op == 2 {
			err = e.ev.Mul(a.v, b, out.v)
		} else {
			err = e.ev.MulRelin(a.v, b, out.v)
		}
	case 4:
		if pt != nil && e.mulPlain(a.v, pt, out.v, true) {
			break
		}
		err = e.ev.MulThenAdd(a.v, b, out.v)
	default:
		fail(codeArgument, "unknown binary op %d", op)
	}
	check(err, codeHE, "binary operation")
	return codeOK
}

// mulPlainNew is the allocating ciphertext x plaintext product through the fast path
// (nil when the fast path does not apply).
func (e *Eval) mulPlainNew(a *rlwe.Ciphertext, pt *PT) *CT {
	level := utils.Min(a.Level(), pt.v.Level())
	out := pooledCT(*e.ev.GetParameters(), a.Degree(), level)
	if !e.mulPlain(a, pt, out.v, false) {
		recycle(out)
		return nil
	}
	return out
}

// addSubNew is the allocating add (op 0) / sub (op 1) of two ciphertexts of equal degree
// into a pooled output (Lattigo then writes every coefficient of it); nil when the
// operands do not have that simple shape.
func (e *Eval) addSubNew(op C.int, a *rlwe.Ciphertext, b *rlwe.Ciphertext) *CT {
	if a.Degree() != b.Degree() || a.MetaData == nil || b.MetaData == nil {
		return nil
	}
	out := pooledCT(*e.ev.GetParameters(), a.Degree(), utils.Min(a.Level(), b.Level()))
	var err error
	if op == 0 {
		err = e.ev.Add(a, b, out.v)
	} else {
		err = e.ev.Sub(a, b, out.v)
	}
	check(err, codeHE, "binary operation")
	return out
}

// he_rescale_into rescales a into outh (which may be a).
//
//export he_rescale_into
func he_rescale_into(ph C.uint64_t, evh C.uint64_t, ah, outh C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	e := getEval(ph, evh)
	a := getCT(ph, ah)
	out := getCT(ph, outh)
	if a.v.Level() == 0 {
		fail(codeArgument, "cannot rescale a ciphertext at level 0")
	}
	var err error
	withLock(&e.mu, func() { err = e.ev.Rescale(a.v, out.v) })
	check(err, codeHE, "rescale")
	return codeOK
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

// pooledCT returns a ciphertext of the given shape with the metadata of
// ckks.NewCiphertext and arbitrary coefficients; the caller overwrites all of them.
func pooledCT(P ckks.Parameters, degree, level int) *CT {
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
	return &CT{v: ct, pool: &poolRef{key: key, polys: polys}}
}

// poolRef remembers the buffers a pooled ciphertext was created with.
type poolRef struct {
	key   shapeKey
	polys []ring.Poly
}

// recycle gives a freed ciphertext's buffers back to the pool if it still owns exactly
// them (same shape, same backing arrays); called with the handle already removed.
func recycle(c *CT) {
	r := c.pool
	if r == nil || c.v == nil || len(c.v.Value) != len(r.polys) {
		return
	}
	for i, p := range c.v.Value {
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
