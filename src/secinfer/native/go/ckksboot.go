package main

// CKKS bootstrapping and polynomial evaluation for the fully encrypted baseline that
// SAFHIRE compares against (ORION-style: packed convolutions, polynomial ReLU,
// bootstrapping) [SAFHIRE Sec. 6, baseline]. Kept apart from ckks.go so the HE core's
// files can move without touching this one.
//
// The ciphertexts a user computes on live in the *residual* parameter set (a normal
// secinfer Params handle, made by he_boot_params_new with a sparse ternary secret, as
// Lattigo's bootstrapping needs); a Boot handle holds Lattigo's bootstrapping parameters
// (the residual chain extended by the CoeffsToSlots / EvalMod / SlotsToCoeffs levels), its
// evaluation keys and evaluator.

/*
#include <stdint.h>
#include <stdlib.h>
*/
import "C"

import (
	"encoding/json"
	"sync"

	"github.com/tuneinsight/lattigo/v6/circuits/ckks/bootstrapping"
	"github.com/tuneinsight/lattigo/v6/circuits/ckks/polynomial"
	"github.com/tuneinsight/lattigo/v6/ring"
	"github.com/tuneinsight/lattigo/v6/schemes/ckks"
	"github.com/tuneinsight/lattigo/v6/utils"
	"github.com/tuneinsight/lattigo/v6/utils/bignum"
)

// Boot is a bootstrapping evaluator bound to a residual parameter handle.
type Boot struct {
	ph       uint64
	bp       bootstrapping.Parameters
	ev       *bootstrapping.Evaluator
	keyBytes int
	mu       sync.Mutex
}

type bootParamsSpec struct {
	LogN            int
	LogQ            []int
	LogP            []int
	LogDefaultScale int
	XsH             int // Hamming weight of the sparse ternary secret
}

// he_boot_params_new makes a residual parameter set with a sparse ternary secret of
// Hamming weight XsH (Lattigo's bootstrapping examples use H = 192) and registers it as an
// ordinary Params handle: every he_* call works on it.
//
//export he_boot_params_new
func he_boot_params_new(spec *C.char, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	var s bootParamsSpec
	check(json.Unmarshal([]byte(C.GoString(spec)), &s), codeArgument, "parameter spec")
	if s.LogN < 10 || s.LogN > 17 {
		fail(codeArgument, "LogN %d out of range for bootstrapping", s.LogN)
	}
	if s.XsH < 1 || s.XsH > (1<<s.LogN) {
		fail(codeArgument, "secret Hamming weight %d out of range", s.XsH)
	}
	if len(s.LogP) == 0 {
		fail(codeArgument, "bootstrapping parameters need a special prime P")
	}
	p, err := ckks.NewParametersFromLiteral(ckks.ParametersLiteral{
		LogN: s.LogN, LogQ: s.LogQ, LogP: s.LogP, LogDefaultScale: s.LogDefaultScale,
		Xs: ring.Ternary{H: s.XsH},
	})
	check(err, codeArgument, "parameters")
	*out = C.uint64_t(put(&Params{P: p, enc: ckks.NewEncoder(p)}))
	return codeOK
}

// he_boot_new generates the bootstrapping keys for sk and returns a Boot handle.
// logSlots: the slot count bootstrapped (full packing: LogN-1). Rings below 2^16 get the
// message ratio raised by 16 - LogN (Lattigo's own short-ring setting: tests only, the
// ring is then insecure for the extended modulus).
//
//export he_boot_new
func he_boot_new(ph C.uint64_t, skh C.uint64_t, logSlots C.int, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	p := params(ph)
	if p.base2 != 0 {
		fail(codeArgument, "bootstrapping needs a parameter set with a special prime")
	}
	sk := getSK(ph, skh)
	logN := p.P.LogN()
	ls := int(logSlots)
	if ls < 1 || ls > logN-1 {
		fail(codeArgument, "logSlots %d out of range 1..%d", ls, logN-1)
	}
	lit := bootstrapping.ParametersLiteral{
		LogN:     utils.Pointy(logN),
		LogP:     []int{61, 61, 61, 61},
		Xs:       p.P.Xs(),
		LogSlots: utils.Pointy(ls),
	}
	if logN < 16 {
		lit.LogMessageRatio = utils.Pointy(bootstrapping.DefaultLogMessageRatio + 16 - logN)
	}
	bp, err := bootstrapping.NewParametersFromLiteral(p.P, lit)
	check(err, codeArgument, "bootstrapping parameters")
	evk, _, err := bp.GenEvaluationKeys(sk.v)
	check(err, codeHE, "bootstrapping keys")
	ev, err := bootstrapping.NewEvaluator(bp, evk)
	check(err, codeHE, "bootstrapping evaluator")
	*out = C.uint64_t(put(&Boot{ph: uint64(ph), bp: bp, ev: ev, keyBytes: evk.BinarySize()}))
	return codeOK
}

// he_boot_info writes: output level, bootstrapping ring logN, log2(QP) of the extended
// parameters (rounded), key bytes, the extended chain's Q count, its P count, the secret's
// Hamming weight, the depth the bootstrapping circuit consumes.
//
//export he_boot_info
func he_boot_info(ph C.uint64_t, bh C.uint64_t, out *C.uint64_t, n C.int, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	b := get[*Boot](uint64(bh), "bootstrapper")
	bound(uint64(ph), b.ph, "bootstrapper")
	bp := b.bp.BootstrappingParameters
	vals := []uint64{uint64(b.ev.OutputLevel()), uint64(bp.LogN()), uint64(bp.LogQP() + 0.5),
		uint64(b.keyBytes), uint64(bp.QCount()), uint64(bp.PCount()),
		uint64(bp.XsHammingWeight()), uint64(b.bp.Depth())}
	dst := u64s(out, int(n))
	if len(dst) < len(vals) {
		fail(codeArgument, "info buffer too small (%d < %d)", len(dst), len(vals))
	}
	copy(dst, vals)
	return codeOK
}

// he_boot_eval bootstraps a ciphertext (any level; values must lie in [-1, 1] times the
// message ratio) and returns a fresh one at the output level.
//
//export he_boot_eval
func he_boot_eval(ph C.uint64_t, bh C.uint64_t, cth C.uint64_t, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	b := get[*Boot](uint64(bh), "bootstrapper")
	bound(uint64(ph), b.ph, "bootstrapper")
	ct := getCT(ph, cth)
	b.mu.Lock()
	defer b.mu.Unlock()
	res, err := b.ev.Bootstrap(ct.v)
	check(err, codeHE, "bootstrap")
	newCT(ph, res, out)
	return codeOK
}

// he_poly_eval evaluates the Chebyshev series sum_k c_k T_k(t), t = (2x - a - b)/(b - a),
// on every slot of a ciphertext (Lattigo's baby-step giant-step evaluator; depth
// ceil(log2(degree + 1)) plus one level for the change of basis). The result has the
// parameter set's default scale. Needs relinearisation keys in the evaluator.
//
//export he_poly_eval
func he_poly_eval(ph C.uint64_t, evh C.uint64_t, cth C.uint64_t, coeffs *C.double, ncoef C.int, a, b C.double, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	p := params(ph)
	e := getEval(ph, evh)
	ct := getCT(ph, cth)
	if ncoef < 2 || ncoef > 1024 {
		fail(codeArgument, "need 2..1024 Chebyshev coefficients, got %d", int(ncoef))
	}
	if !(float64(b) > float64(a)) {
		fail(codeArgument, "empty interval [%g, %g]", float64(a), float64(b))
	}
	cs := append([]float64(nil), f64s(coeffs, int(ncoef))...)
	poly := bignum.NewPolynomial(bignum.Chebyshev, cs, [2]float64{float64(a), float64(b)})
	need := poly.Depth() + 1
	if ct.v.Level() < need {
		fail(codeArgument, "ciphertext at level %d, the polynomial needs %d levels", ct.v.Level(), need)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	scalar, constant := poly.ChangeOfBasis()
	t, err := e.ev.MulNew(ct.v, scalar)
	check(err, codeHE, "change of basis")
	check(e.ev.Add(t, constant, t), codeHE, "change of basis")
	check(e.ev.Rescale(t, t), codeHE, "rescale")
	res, err := polynomial.NewEvaluator(p.P, e.ev).Evaluate(t, polynomial.NewPolynomial(poly), p.P.DefaultScale())
	check(err, codeHE, "polynomial evaluation")
	newCT(ph, res, out)
	return codeOK
}
