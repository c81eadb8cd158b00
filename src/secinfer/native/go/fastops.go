package main

/*
#include <stdint.h>
*/
import "C"

import (
	"github.com/tuneinsight/lattigo/v6/core/rlwe"
	"github.com/tuneinsight/lattigo/v6/ring"
	"github.com/tuneinsight/lattigo/v6/schemes/ckks"
	"github.com/tuneinsight/lattigo/v6/utils"

	"secinfer/native/he"
)

// Exports of the fast ciphertext x plaintext and add paths (he/fastops.go): into-destination
// variants, and the pooled outputs of he_binop.

// montgomery returns the plaintext in Montgomery form (computed once; plaintexts are
// immutable after creation). Costs one extra polynomial of memory per plaintext that is
// ever multiplied with.
func (p *PT) montgomery(P ckks.Parameters) ring.Poly {
	p.montOnce.Do(func() { p.mont = he.Montgomery(P, p.v) })
	return p.mont
}

// mulPlain is he.MulPlain with the plaintext's cached Montgomery form.
func (e *Eval) mulPlain(a *rlwe.Ciphertext, pt *PT, out *rlwe.Ciphertext, accumulate bool) bool {
	P := *e.ev.GetParameters()
	return he.MulPlain(P, a, pt.v, func() ring.Poly { return pt.montgomery(P) }, out, accumulate)
}

// pooledCT is a pooled output ciphertext (he.PooledCT) as a handle object.
func pooledCT(e *Eval, degree, level int) *CT {
	ct, ref := he.PooledCT(*e.ev.GetParameters(), degree, level)
	return &CT{ph: e.ph, v: ct, pool: ref}
}

// operand resolves a ciphertext-or-plaintext handle bound to ph.
func operand(ph C.uint64_t, h C.uint64_t) (rlwe.Operand, *PT) {
	switch o := anyOwned(ph, h).(type) {
	case *CT:
		return o.v, nil
	case *PT:
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
	out := pooledCT(e, a.Degree(), utils.Min(a.Level(), pt.v.Level()))
	if !e.mulPlain(a, pt, out.v, false) {
		he.Recycle(out.v, out.pool)
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
	out := pooledCT(e, a.Degree(), utils.Min(a.Level(), b.Level()))
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
