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
	"math"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/tuneinsight/lattigo/v6/circuits/ckks/bootstrapping"
	"github.com/tuneinsight/lattigo/v6/circuits/ckks/dft"
	"github.com/tuneinsight/lattigo/v6/circuits/ckks/polynomial"
	"github.com/tuneinsight/lattigo/v6/core/rlwe"
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
	// onDemand: the CoeffsToSlots / SlotsToCoeffs matrices are not kept but encoded for
	// each bootstrap and dropped after their step (see bootstrapOnDemand); enc encodes them
	onDemand bool
	enc      *ckks.Encoder
	dftNanos int64 // time spent encoding them, summed over bootstraps
}

type bootParamsSpec struct {
	LogN            int
	LogQ            []int
	LogP            []int
	LogDefaultScale int
	XsH             int // Hamming weight of the sparse ternary secret; 0: dense ternary
}

// bootSpec is what he_boot_new / he_boot_plan take (JSON): the slot count bootstrapped and
// the special primes of the extended (bootstrapping) chain. Empty LogP: Lattigo's default
// bootstrapping literal's four 61-bit primes (the ckks-boot-n1x sets of before).
type bootSpec struct {
	LogSlots    int
	LogP        []int
	DFTOnDemand bool // see Boot.onDemand
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
	if s.XsH < 0 || s.XsH > (1<<s.LogN) {
		fail(codeArgument, "secret Hamming weight %d out of range", s.XsH)
	}
	// XsH = 0: Lattigo's dense ternary secret (P(+-1) = 2/3); bootstrapping then switches to
	// a sparse ephemeral secret only around ModRaise (Lattigo's encapsulation, weight 32)
	var xs ring.DistributionParameters = rlwe.DefaultXs
	if s.XsH > 0 {
		xs = ring.Ternary{H: s.XsH}
	}
	if len(s.LogP) == 0 {
		fail(codeArgument, "bootstrapping parameters need a special prime P")
	}
	p, err := ckks.NewParametersFromLiteral(ckks.ParametersLiteral{
		LogN: s.LogN, LogQ: s.LogQ, LogP: s.LogP, LogDefaultScale: s.LogDefaultScale,
		Xs: xs,
	})
	check(err, codeArgument, "parameters")
	*out = C.uint64_t(put(&Params{P: p, enc: ckks.NewEncoder(p)}))
	return codeOK
}

// bootLiteral builds Lattigo's bootstrapping parameters for the residual set p from a
// bootSpec. Rings below 2^16 get the message ratio raised by 16 - LogN (Lattigo's own
// short-ring setting: tests only, the ring is then insecure for the extended modulus).
func bootLiteral(p *Params, specJSON *C.char) bootstrapping.Parameters {
	if p.base2 != 0 {
		fail(codeArgument, "bootstrapping needs a parameter set with a special prime")
	}
	var s bootSpec
	check(json.Unmarshal([]byte(C.GoString(specJSON)), &s), codeArgument, "bootstrapping spec")
	logN := p.P.LogN()
	if s.LogSlots < 1 || s.LogSlots > logN-1 {
		fail(codeArgument, "logSlots %d out of range 1..%d", s.LogSlots, logN-1)
	}
	logP := []int{61, 61, 61, 61}
	if len(s.LogP) > 0 {
		logP = s.LogP
	}
	lit := bootstrapping.ParametersLiteral{
		LogN:     utils.Pointy(logN),
		LogP:     logP,
		Xs:       p.P.Xs(),
		LogSlots: utils.Pointy(s.LogSlots),
	}
	if logN < 16 {
		lit.LogMessageRatio = utils.Pointy(bootstrapping.DefaultLogMessageRatio + 16 - logN)
	}
	bp, err := bootstrapping.NewParametersFromLiteral(p.P, lit)
	check(err, codeArgument, "bootstrapping parameters")
	return bp
}

// bootPlan: what the bootstrapping keys will be, without generating them: ring logN, log
// slots, extended Q count, P count, ceil(log2 QP), decomposition count dnum = ceil(#Q /
// #P), Galois keys (CoeffsToSlots, SlotsToCoeffs, sub-sums, conjugation), bytes of one
// Galois key (2 x dnum x N x (#Q + #P) x 8), depth, output level.
func bootPlan(bp bootstrapping.Parameters) []uint64 {
	b := bp.BootstrappingParameters
	nq, np := b.QCount(), b.PCount()
	dnum := (nq + np - 1) / np
	gal := len(bp.GaloisElements(b))
	keyBytes := 2 * dnum * b.N() * (nq + np) * 8
	return []uint64{uint64(b.LogN()), uint64(bp.LogMaxSlots()), uint64(nq), uint64(np),
		uint64(math.Ceil(b.LogQP())), uint64(dnum), uint64(gal), uint64(keyBytes),
		uint64(bp.Depth()), uint64(b.MaxLevel() - bp.Depth())}
}

// he_boot_plan writes bootPlan's values for the residual set ph and a bootSpec (no keys).
//
//export he_boot_plan
func he_boot_plan(ph C.uint64_t, spec *C.char, out *C.uint64_t, n C.int, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	vals := bootPlan(bootLiteral(params(ph), spec))
	dst := u64s(out, int(n))
	if len(dst) < len(vals) {
		fail(codeArgument, "plan buffer too small (%d < %d)", len(dst), len(vals))
	}
	copy(dst, vals)
	return codeOK
}

// he_boot_new generates the bootstrapping keys for sk and returns a Boot handle. The Go
// collector runs at a 10 % heap growth while the keys are made (the keys only accumulate:
// at the default 100 % the heap could reach twice what is live, ~2 x 8 GB at N = 2^16),
// then collects and returns freed memory to the OS.
//
//export he_boot_new
func he_boot_new(ph C.uint64_t, skh C.uint64_t, spec *C.char, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	p := params(ph)
	sk := getSK(ph, skh)
	bp := bootLiteral(p, spec)
	var s bootSpec
	check(json.Unmarshal([]byte(C.GoString(spec)), &s), codeArgument, "bootstrapping spec")
	old := debug.SetGCPercent(10)
	defer func() {
		debug.SetGCPercent(old)
		runtime.GC()
		debug.FreeOSMemory()
	}()
	if s.DFTOnDemand {
		evk, ev := bootKeysLowPeak(bp, sk.v)
		*out = C.uint64_t(put(&Boot{ph: uint64(ph), bp: bp, ev: ev, keyBytes: evk.BinarySize(),
			onDemand: true, enc: ckks.NewEncoder(bp.BootstrappingParameters)}))
		return codeOK
	}
	evk, _, err := bp.GenEvaluationKeys(sk.v)
	check(err, codeHE, "bootstrapping keys")
	ev, err := bootstrapping.NewEvaluator(bp, evk)
	check(err, codeHE, "bootstrapping evaluator")
	*out = C.uint64_t(put(&Boot{ph: uint64(ph), bp: bp, ev: ev, keyBytes: evk.BinarySize()}))
	return codeOK
}

// bootKeysLowPeak makes the same keys as Lattigo's Parameters.GenEvaluationKeys (same ring
// for the residual and bootstrapping sets only) and the evaluator, in an order that never
// holds the Galois keys and the DFT matrices together: the evaluator is built while the
// Galois key map holds empty placeholders (Lattigo's constructor only checks that every
// element is present), its two DFT matrices are dropped (bootstrapOnDemand re-encodes them
// from the literals the constructor scaled), and only then are the Galois keys generated,
// one at a time, into the map the evaluator reads at each key switch. At N = 2^16
// (ckks-boot-n16-dense-128) this is 5.0 GB of keys instead of 5.0 + 3.6 GB.
func bootKeysLowPeak(bp bootstrapping.Parameters, skN1 *rlwe.SecretKey) (*bootstrapping.EvaluationKeys, *bootstrapping.Evaluator) {
	paramsN2 := bp.BootstrappingParameters
	if bp.ResidualParameters.N() != paramsN2.N() || bp.ResidualParameters.RingType() != ring.Standard {
		fail(codeArgument, "on-demand DFT matrices need the residual and bootstrapping rings equal")
	}
	ringQ, ringP := paramsN2.RingQ(), paramsN2.RingP()
	skN2 := rlwe.NewSecretKey(paramsN2)
	buff := ringQ.NewPoly()
	rlwe.ExtendBasisSmallNormAndCenterNTTMontgomery(ringQ, ringQ, skN1.Value.Q, buff, skN2.Value.Q)
	rlwe.ExtendBasisSmallNormAndCenterNTTMontgomery(ringQ, ringP, skN1.Value.Q, buff, skN2.Value.P)
	kgen := rlwe.NewKeyGenerator(paramsN2)
	evk := &bootstrapping.EvaluationKeys{}
	if w := bp.EphemeralSecretWeight; w != 0 {
		// the sparse-secret encapsulation keys, as Lattigo makes them: the ephemeral sparse
		// secret lives on the first Q and P primes only
		sparse, err := rlwe.NewParametersFromLiteral(rlwe.ParametersLiteral{
			LogN: paramsN2.LogN(), Q: paramsN2.Q()[:1], P: paramsN2.P()[:1]})
		check(err, codeHE, "sparse-secret parameters")
		kgenSparse := rlwe.NewKeyGenerator(sparse)
		skSparse := kgenSparse.GenSecretKeyWithHammingWeightNew(w)
		evk.EvkDenseToSparse = kgenSparse.GenEvaluationKeyNew(skN2, skSparse)
		evk.EvkSparseToDense = kgen.GenEvaluationKeyNew(skSparse, skN2)
	}
	gal := append(bp.GaloisElements(paramsN2), paramsN2.GaloisElementForComplexConjugation())
	evk.MemEvaluationKeySet = rlwe.NewMemEvaluationKeySet(kgen.GenRelinearizationKeyNew(skN2))
	for _, g := range gal {
		evk.GaloisKeys[g] = &rlwe.GaloisKey{GaloisElement: g} // placeholder (see above)
	}
	ev, err := bootstrapping.NewEvaluator(bp, evk)
	check(err, codeHE, "bootstrapping evaluator")
	ev.C2SDFTMatrix, ev.S2CDFTMatrix = dft.Matrix{}, dft.Matrix{}
	runtime.GC()
	debug.FreeOSMemory()
	for _, g := range gal {
		evk.GaloisKeys[g] = kgen.GenGaloisKeyNew(g, skN2)
	}
	return evk, ev
}

// bootstrapOnDemand is Lattigo's bootstrap (ModUpThenEncode order, one iteration, same
// ring) with each DFT matrix encoded just before its step and dropped after it.
func (b *Boot) bootstrapOnDemand(ctIn *rlwe.Ciphertext) *rlwe.Ciphertext {
	ev := b.ev
	params := b.bp.BootstrappingParameters
	if b.bp.IterationsParameters != nil || b.bp.ResidualParameters.PrecisionMode() == ckks.PREC128 {
		fail(codeArgument, "on-demand DFT matrices: one-iteration, 64-bit precision bootstrapping only")
	}
	logSlots := ctIn.LogSlots()
	cts, err := ev.PackAndSwitchN1ToN2([]rlwe.Ciphertext{*ctIn.CopyNew()})
	check(err, codeHE, "bootstrap: pack")
	ct, _, err := ev.ScaleDown(&cts[0])
	check(err, codeHE, "bootstrap: scale down")
	ct, err = ev.ModUp(ct)
	check(err, codeHE, "bootstrap: mod up")
	matrix := func(lit dft.MatrixLiteral) dft.Matrix {
		t := time.Now()
		m, err := dft.NewMatrixFromLiteral(params, lit, b.enc)
		check(err, codeHE, "bootstrap: DFT matrix")
		b.dftNanos += int64(time.Since(t))
		return m
	}
	c2s := matrix(ev.CoeffsToSlotsParameters)
	re, im, err := ev.DFTEvaluator.CoeffsToSlotsNew(ct, c2s)
	check(err, codeHE, "bootstrap: CoeffsToSlots")
	c2s = dft.Matrix{}
	runtime.GC()
	re, err = ev.EvalMod(re)
	check(err, codeHE, "bootstrap: EvalMod")
	if im != nil {
		im, err = ev.EvalMod(im)
		check(err, codeHE, "bootstrap: EvalMod")
	}
	s2c := matrix(ev.SlotsToCoeffsParameters)
	out, err := ev.DFTEvaluator.SlotsToCoeffsNew(re, im, s2c)
	check(err, codeHE, "bootstrap: SlotsToCoeffs")
	s2c = dft.Matrix{}
	runtime.GC()
	outs, err := ev.UnpackAndSwitchN2Tn1([]rlwe.Ciphertext{*out}, logSlots, 1)
	check(err, codeHE, "bootstrap: unpack")
	res := &outs[0]
	res.Scale = b.bp.ResidualParameters.DefaultScale()
	return res
}

// he_go_memory sets the Go runtime's soft memory limit (bytes; < 0 leaves it) and GC
// percent (< 0 leaves it), and writes the previous limit, the previous percent, the live
// heap (bytes, after a collection), the heap the OS holds for Go, and the runtime's total
// from the OS. For the baseline's big runs, which hold several GB of keys: a limit makes
// the collector work harder instead of letting the heap double past what is live.
//
//export he_go_memory
func he_go_memory(limit C.int64_t, percent C.int, out *C.uint64_t, n C.int, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	dst := u64s(out, int(n))
	if len(dst) < 5 {
		fail(codeArgument, "memory buffer too small (%d < 5)", len(dst))
	}
	prevLimit := debug.SetMemoryLimit(-1)
	if int64(limit) >= 0 {
		debug.SetMemoryLimit(int64(limit))
	}
	prevPct := debug.SetGCPercent(-1)
	debug.SetGCPercent(prevPct)
	if int(percent) >= 0 {
		debug.SetGCPercent(int(percent))
	}
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	copy(dst, []uint64{uint64(prevLimit), uint64(prevPct), m.HeapAlloc, m.HeapSys - m.HeapReleased, m.Sys})
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
	onDemand := uint64(0)
	if b.onDemand {
		onDemand = 1
	}
	vals := []uint64{uint64(b.ev.OutputLevel()), uint64(bp.LogN()), uint64(bp.LogQP() + 0.5),
		uint64(b.keyBytes), uint64(bp.QCount()), uint64(bp.PCount()),
		uint64(bp.XsHammingWeight()), uint64(b.bp.Depth()), onDemand, uint64(b.dftNanos)}
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
	if b.onDemand {
		newCT(ph, b.bootstrapOnDemand(ct.v), out)
		return codeOK
	}
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
