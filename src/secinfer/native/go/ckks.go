package main

/*
#include <stdint.h>
#include <stdlib.h>
*/
import "C"

import (
	"encoding/json"
	"math"
	"sync"

	"github.com/tuneinsight/lattigo/v6/circuits/ckks/lintrans"
	"github.com/tuneinsight/lattigo/v6/core/rlwe"
	"github.com/tuneinsight/lattigo/v6/ring"
	"github.com/tuneinsight/lattigo/v6/schemes/ckks"

	"secinfer/native/he"
)

// Params is a CKKS parameter set plus an encoder (guarded: Lattigo encoders hold buffers).
type Params struct {
	P   ckks.Parameters
	enc *ckks.Encoder
	mu  sync.Mutex
	// base2 > 0: evaluation keys use a base-2^base2 gadget decomposition (sets without a
	// special prime P, secinfer's rlwe-* SAFHIRE sets); see evkParams.
	base2 int
}

// Bound objects remember the parameter handle they were made under.
type SK struct {
	ph uint64
	v  *rlwe.SecretKey
}
type PK struct {
	ph uint64
	v  *rlwe.PublicKey
	// qOnly: only the Q part is meaningful (a key rebuilt from a proven (pk0, a) over Q,
	// pkproof.go); Lattigo's own encryption, which also uses the P part, refuses it.
	qOnly bool
}
type EvalKeys struct {
	ph uint64
	v  *rlwe.MemEvaluationKeySet
}
type PT struct {
	ph uint64
	v  *rlwe.Plaintext
	// Montgomery form of v, computed on the first multiplication (see fastops.go).
	// Plaintexts are never modified after creation, so the cache cannot go stale.
	mont     ring.Poly
	montOnce sync.Once
}
type CT struct {
	ph   uint64
	v    *rlwe.Ciphertext
	pool *he.PoolRef // set when the buffers came from (and go back to) the output pool
}
type Eval struct {
	ph  uint64
	ev  *ckks.Evaluator
	lt  *lintrans.Evaluator
	evk *rlwe.MemEvaluationKeySet
	mu  sync.Mutex
}
type LT struct {
	ph uint64
	v  lintrans.LinearTransformation
}

func params(ph C.uint64_t) *Params { return get[*Params](uint64(ph), "parameter set") }

func bound(ph uint64, objPh uint64, what string) {
	if ph != objPh {
		fail(codeMismatch, "%s belongs to another parameter set", what)
	}
}

// owned: the handle objects that remember their parameter set (and their kind's name).
type owned interface{ owner() (uint64, string) }

func (o *SK) owner() (uint64, string)       { return o.ph, "secret key" }
func (o *PK) owner() (uint64, string)       { return o.ph, "public key" }
func (o *EvalKeys) owner() (uint64, string) { return o.ph, "evaluation keys" }
func (o *PT) owner() (uint64, string)       { return o.ph, "plaintext" }
func (o *CT) owner() (uint64, string)       { return o.ph, "ciphertext" }
func (o *Eval) owner() (uint64, string)     { return o.ph, "evaluator" }
func (o *LT) owner() (uint64, string)       { return o.ph, "linear transform" }
func (o *LWEBatch) owner() (uint64, string) { return o.ph, "LWE batch" }

// getOwned resolves handle h as a T made under the parameter set ph.
func getOwned[T owned](ph, h C.uint64_t, kind string) T {
	o := get[T](uint64(h), kind)
	id, _ := o.owner()
	bound(uint64(ph), id, kind)
	return o
}

// anyOwned resolves a handle of any kind, checked against ph when it is bound to a
// parameter set (for exports that accept several kinds and switch on the type).
func anyOwned(ph, h C.uint64_t) any {
	o := getAny(uint64(h))
	if b, ok := o.(owned); ok {
		id, kind := b.owner()
		bound(uint64(ph), id, kind)
	}
	return o
}

func getCT(ph, h C.uint64_t) *CT     { return getOwned[*CT](ph, h, "ciphertext") }
func getPT(ph, h C.uint64_t) *PT     { return getOwned[*PT](ph, h, "plaintext") }
func getSK(ph, h C.uint64_t) *SK     { return getOwned[*SK](ph, h, "secret key") }
func getPK(ph, h C.uint64_t) *PK     { return getOwned[*PK](ph, h, "public key") }
func getEval(ph, h C.uint64_t) *Eval { return getOwned[*Eval](ph, h, "evaluator") }

func newCT(ph C.uint64_t, ct *rlwe.Ciphertext, out *C.uint64_t) {
	*out = C.uint64_t(put(&CT{ph: uint64(ph), v: ct}))
}

// ---------------------------------------------------------------- parameters

type paramsSpec struct {
	LogN            int
	LogQ            []int
	LogP            []int
	LogDefaultScale int
	KeyBase2        int `json:",omitempty"`
}

//export he_params_new
func he_params_new(spec *C.char, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	var s paramsSpec
	check(json.Unmarshal([]byte(C.GoString(spec)), &s), codeArgument, "parameter spec")
	if s.LogN < 4 || s.LogN > 17 {
		fail(codeArgument, "LogN %d out of range", s.LogN)
	}
	p, err := ckks.NewParametersFromLiteral(ckks.ParametersLiteral{
		LogN: s.LogN, LogQ: s.LogQ, LogP: s.LogP, LogDefaultScale: s.LogDefaultScale,
	})
	check(err, codeArgument, "parameters")
	if s.KeyBase2 < 0 || s.KeyBase2 > 61 || (s.KeyBase2 == 0 && len(s.LogP) == 0) {
		fail(codeArgument, "KeyBase2 %d: need 1..61, or a special prime P", s.KeyBase2)
	}
	*out = C.uint64_t(put(&Params{P: p, enc: ckks.NewEncoder(p), base2: s.KeyBase2}))
	return codeOK
}

// he_params_info writes N, MaxLevel, MaxSlots, QCount, PCount, then the Q and P moduli.
//
//export he_params_info
func he_params_info(ph C.uint64_t, out *C.uint64_t, n C.int, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	p := params(ph).P
	vals := []uint64{uint64(p.N()), uint64(p.MaxLevel()), uint64(p.MaxSlots()), uint64(p.QCount()), uint64(p.PCount())}
	vals = append(vals, p.Q()...)
	vals = append(vals, p.P()...)
	dst := u64s(out, int(n))
	if len(dst) < len(vals) {
		fail(codeArgument, "info buffer too small (%d < %d)", len(dst), len(vals))
	}
	copy(dst, vals)
	return codeOK
}

// ---------------------------------------------------------------- keys

//export he_keygen
func he_keygen(ph C.uint64_t, skOut, pkOut *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	p := params(ph)
	kgen := rlwe.NewKeyGenerator(p.P)
	sk, pk := kgen.GenKeyPairNew()
	*skOut = C.uint64_t(put(&SK{uint64(ph), sk}))
	*pkOut = C.uint64_t(put(&PK{ph: uint64(ph), v: pk}))
	return codeOK
}

//export he_pk_from_sk
func he_pk_from_sk(ph C.uint64_t, skh C.uint64_t, pkOut *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	sk := getSK(ph, skh)
	pk := rlwe.NewKeyGenerator(params(ph).P).GenPublicKeyNew(sk.v)
	*pkOut = C.uint64_t(put(&PK{ph: uint64(ph), v: pk}))
	return codeOK
}

// he_galois_elements maps requests to Galois elements: kind 0 = rotations by ks[i],
// 1 = conjugation, 2 = packing (all logN), 3 = expand, 4 = trace down to ks[0].
//
//export he_galois_elements
func he_galois_elements(ph C.uint64_t, kind C.int, ks *C.int64_t, nk C.int, out *C.uint64_t, nout C.int, written *C.int, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	p := params(ph).P
	var els []uint64
	switch kind {
	case 0:
		for _, k := range i64s(ks, int(nk)) {
			els = append(els, p.GaloisElement(int(k)))
		}
	case 1:
		els = []uint64{p.GaloisElementForComplexConjugation()}
	case 2:
		els = rlwe.GaloisElementsForPack(p, p.LogN())
	case 3:
		els = rlwe.GaloisElementsForExpand(p, p.LogN())
	case 4:
		k := i64s(ks, int(nk))
		if len(k) != 1 || k[0] < 0 || int(k[0]) > p.LogN() {
			fail(codeArgument, "trace needs one target logN in [0, %d]", p.LogN())
		}
		els = rlwe.GaloisElementsForTrace(p, int(k[0]))
	default:
		fail(codeArgument, "unknown Galois request kind %d", kind)
	}
	dst := u64s(out, int(nout))
	if len(dst) < len(els) {
		fail(codeArgument, "Galois buffer too small")
	}
	copy(dst, els)
	*written = C.int(len(els))
	return codeOK
}

// he_evk_gen generates a relinearisation key (if relin != 0) and Galois keys.
//
//export he_evk_gen
func he_evk_gen(ph C.uint64_t, skh C.uint64_t, relin C.int, gal *C.uint64_t, ngal C.int, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	p := params(ph).P
	sk := getSK(ph, skh)
	kgen := rlwe.NewKeyGenerator(p)
	var rlk *rlwe.RelinearizationKey
	if relin != 0 {
		rlk = kgen.GenRelinearizationKeyNew(sk.v, evkParams(ph)...)
	}
	seen := map[uint64]bool{}
	var gks []*rlwe.GaloisKey
	for _, g := range u64s(gal, int(ngal)) {
		if g%2 == 0 || g >= uint64(2*p.N()) {
			fail(codeArgument, "invalid Galois element %d", g)
		}
		if seen[g] || g == 1 {
			continue
		}
		seen[g] = true
		gks = append(gks, kgen.GenGaloisKeyNew(g, sk.v, evkParams(ph)...))
	}
	*out = C.uint64_t(put(&EvalKeys{uint64(ph), rlwe.NewMemEvaluationKeySet(rlk, gks...)}))
	return codeOK
}

// he_evk_info writes has-relin then the Galois elements held.
//
//export he_evk_info
func he_evk_info(ph C.uint64_t, h C.uint64_t, out *C.uint64_t, nout C.int, written *C.int, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	k := getOwned[*EvalKeys](ph, h, "evaluation keys")
	vals := []uint64{0}
	if k.v.RelinearizationKey != nil {
		vals[0] = 1
	}
	vals = append(vals, k.v.GetGaloisKeysList()...)
	dst := u64s(out, int(nout))
	if len(dst) < len(vals) {
		fail(codeArgument, "buffer too small")
	}
	copy(dst, vals)
	*written = C.int(len(vals))
	return codeOK
}

//export he_evaluator_new
func he_evaluator_new(ph C.uint64_t, evkh C.uint64_t, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	p := params(ph).P
	var evk *rlwe.MemEvaluationKeySet
	if evkh != 0 {
		evk = getOwned[*EvalKeys](ph, evkh, "evaluation keys").v
	} else {
		evk = rlwe.NewMemEvaluationKeySet(nil)
	}
	ev := ckks.NewEvaluator(p, evk)
	*out = C.uint64_t(put(&Eval{ph: uint64(ph), ev: ev, lt: lintrans.NewEvaluator(ev), evk: evk}))
	return codeOK
}

// ---------------------------------------------------------------- encode / encrypt

//export he_encode
func he_encode(ph C.uint64_t, re, im *C.double, n C.int, logSlots C.int, level C.int, logScale C.double, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	p := params(ph)
	P := p.P
	if int(logSlots) < 0 || int(logSlots) > P.LogMaxSlots() {
		fail(codeArgument, "logSlots %d out of range [0, %d]", logSlots, P.LogMaxSlots())
	}
	if int(level) < 0 || int(level) > P.MaxLevel() {
		fail(codeArgument, "level %d out of range [0, %d]", level, P.MaxLevel())
	}
	slots := 1 << int(logSlots)
	if int(n) > slots {
		fail(codeArgument, "%d values do not fit %d slots", n, slots)
	}
	vals := make([]complex128, slots)
	r, i := f64s(re, int(n)), f64s(im, int(n))
	for k := 0; k < int(n); k++ {
		if math.IsNaN(r[k]) || math.IsNaN(i[k]) || math.IsInf(r[k], 0) || math.IsInf(i[k], 0) {
			fail(codeArgument, "value %d is not finite", k)
		}
		vals[k] = complex(r[k], i[k])
	}
	pt := ckks.NewPlaintext(P, int(level))
	pt.LogDimensions.Cols = int(logSlots)
	if logScale > 0 {
		pt.Scale = rlwe.NewScale(math.Exp2(float64(logScale)))
	}
	var err error
	withLock(&p.mu, func() { err = p.enc.Encode(vals, pt) })
	check(err, codeHE, "encode")
	*out = C.uint64_t(put(&PT{ph: uint64(ph), v: pt}))
	return codeOK
}

//export he_decode
func he_decode(ph C.uint64_t, pth C.uint64_t, re, im *C.double, n C.int, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	p := params(ph)
	pt := getPT(ph, pth)
	slots := pt.v.Slots()
	if int(n) != slots {
		fail(codeArgument, "decode buffer has %d entries, plaintext has %d slots", n, slots)
	}
	vals := make([]complex128, slots)
	var err error
	withLock(&p.mu, func() { err = p.enc.Decode(pt.v, vals) })
	check(err, codeHE, "decode")
	r, i := f64s(re, slots), f64s(im, slots)
	for k, v := range vals {
		r[k], i[k] = real(v), imag(v)
	}
	return codeOK
}

// he_encrypt encrypts with a public or a secret key (whichever the handle is).
//
//export he_encrypt
func he_encrypt(ph C.uint64_t, keyh C.uint64_t, pth C.uint64_t, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	pt := getPT(ph, pth)
	var key rlwe.EncryptionKey
	switch k := anyOwned(ph, keyh).(type) {
	case *PK:
		if k.qOnly {
			fail(codeArgument, "this public key is valid over Q only: use he_encrypt_rand")
		}
		key = k.v
	case *SK:
		key = k.v
	default:
		fail(codeArgument, "handle %d is not an encryption key", keyh)
	}
	ct, err := rlwe.NewEncryptor(P, key).EncryptNew(pt.v)
	check(err, codeHE, "encrypt")
	newCT(ph, ct, out)
	return codeOK
}

//export he_decrypt
func he_decrypt(ph C.uint64_t, skh C.uint64_t, cth C.uint64_t, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	sk := getSK(ph, skh)
	ct := getCT(ph, cth)
	if ct.v.Degree() != 1 {
		fail(codeArgument, "decrypt needs a degree-1 ciphertext (relinearise first)")
	}
	pt := rlwe.NewDecryptor(P, sk.v).DecryptNew(ct.v)
	*out = C.uint64_t(put(&PT{ph: uint64(ph), v: pt}))
	return codeOK
}

// he_ct_info writes level, degree, log2(scale), logSlots, isNTT.
//
//export he_ct_info
func he_ct_info(ph C.uint64_t, h C.uint64_t, out *C.double, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	var el *rlwe.Element[ring.Poly]
	var degree int
	switch o := anyOwned(ph, h).(type) {
	case *CT:
		el, degree = o.v.El(), o.v.Degree()
	case *PT:
		el, degree = o.v.El(), 0
	default:
		fail(codeArgument, "handle %d is neither ciphertext nor plaintext", h)
	}
	ntt := 0.0
	if el.IsNTT {
		ntt = 1
	}
	copy(f64s(out, 5), []float64{float64(el.Level()), float64(degree), he.ScaleLog2(el.Scale), float64(el.LogDimensions.Cols), ntt})
	return codeOK
}

// ---------------------------------------------------------------- arithmetic

// he_binop: op 0 add, 1 sub, 2 mul (no relin), 3 mul+relin. b may be a ciphertext or plaintext.
//
//export he_binop
func he_binop(ph C.uint64_t, evh C.uint64_t, op C.int, ah, bh C.uint64_t, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	e := getEval(ph, evh)
	a := getCT(ph, ah)
	b, pt := operand(ph, bh)
	e.mu.Lock()
	defer e.mu.Unlock()
	var ct *rlwe.Ciphertext
	var err error
	// Fast paths (fastops.go): pooled output, cached Montgomery plaintext; same result.
	var fast *CT
	if bc, isCT := b.(*rlwe.Ciphertext); isCT && (op == 0 || op == 1) {
		fast = e.addSubNew(op, a.v, bc)
	} else if pt != nil && (op == 2 || op == 3) {
		fast = e.mulPlainNew(a.v, pt)
	}
	if fast != nil {
		*out = C.uint64_t(put(fast))
		return codeOK
	}
	switch {
	case op == 0:
		ct, err = e.ev.AddNew(a.v, b)
	case op == 1:
		ct, err = e.ev.SubNew(a.v, b)
	case op == 2:
		ct, err = e.ev.MulNew(a.v, b)
	case op == 3:
		ct, err = e.ev.MulRelinNew(a.v, b)
	default:
		fail(codeArgument, "unknown binary op %d", op)
	}
	check(err, codeHE, "binary operation")
	newCT(ph, ct, out)
	return codeOK
}

// he_scalarop: op 0 add constant, 1 mul by constant (complex re + i*im).
//
//export he_scalarop
func he_scalarop(ph C.uint64_t, evh C.uint64_t, op C.int, ah C.uint64_t, re, im C.double, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	e := getEval(ph, evh)
	a := getCT(ph, ah)
	c := complex(float64(re), float64(im))
	e.mu.Lock()
	defer e.mu.Unlock()
	var ct *rlwe.Ciphertext
	var err error
	switch op {
	case 0:
		ct, err = e.ev.AddNew(a.v, c)
		if err == nil {
			// Lattigo encodes the constant at a's scale but AddNew's fresh output carries the
			// default scale: the result is at a's scale
			ct.Scale = a.v.Scale
		}
	case 1:
		ct, err = e.ev.MulNew(a.v, c)
	default:
		fail(codeArgument, "unknown scalar op %d", op)
	}
	check(err, codeHE, "scalar operation")
	newCT(ph, ct, out)
	return codeOK
}

// he_unop: op 0 rescale, 1 relinearise, 2 conjugate, 3 rotate by k, 4 drop k levels.
//
//export he_unop
func he_unop(ph C.uint64_t, evh C.uint64_t, op C.int, ah C.uint64_t, k C.int64_t, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	e := getEval(ph, evh)
	a := getCT(ph, ah)
	e.mu.Lock()
	defer e.mu.Unlock()
	var ct *rlwe.Ciphertext
	var err error
	switch op {
	case 0:
		if a.v.Level() == 0 {
			fail(codeArgument, "cannot rescale a ciphertext at level 0")
		}
		ct = ckks.NewCiphertext(*e.ev.GetParameters(), a.v.Degree(), a.v.Level()-1)
		err = e.ev.Rescale(a.v, ct)
	case 1:
		ct, err = e.ev.RelinearizeNew(a.v)
	case 2:
		ct, err = e.ev.ConjugateNew(a.v)
	case 3:
		ct, err = e.ev.RotateNew(a.v, int(k))
	case 4:
		if int(k) < 0 || int(k) > a.v.Level() {
			fail(codeArgument, "cannot drop %d levels from level %d", k, a.v.Level())
		}
		ct = e.ev.DropLevelNew(a.v, int(k))
	default:
		fail(codeArgument, "unknown unary op %d", op)
	}
	check(err, codeHE, "unary operation")
	newCT(ph, ct, out)
	return codeOK
}

//export he_rotate_hoisted
func he_rotate_hoisted(ph C.uint64_t, evh C.uint64_t, ah C.uint64_t, ks *C.int64_t, nk C.int, outs *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	e := getEval(ph, evh)
	a := getCT(ph, ah)
	if a.v.Degree() != 1 {
		fail(codeArgument, "hoisted rotation needs a degree-1 ciphertext")
	}
	rots := make([]int, int(nk))
	for i, k := range i64s(ks, int(nk)) {
		rots[i] = int(k)
	}
	var res map[int]*rlwe.Ciphertext
	var err error
	withLock(&e.mu, func() { res, err = e.ev.RotateHoistedNew(a.v, rots) })
	check(err, codeHE, "hoisted rotation")
	dst := u64s((*C.uint64_t)(outs), int(nk))
	for i, k := range rots {
		dst[i] = put(&CT{ph: uint64(ph), v: res[k]})
	}
	return codeOK
}

// ---------------------------------------------------------------- linear transforms

// he_lt_new encodes a diagonal-form matrix: diags[i] holds the slot vector of diagonal
// idx[i] (re/im laid out diag-major, `slots` entries each). bsgsRatio < 0 disables BSGS.
//
//export he_lt_new
func he_lt_new(ph C.uint64_t, idx *C.int64_t, ndiag C.int, re, im *C.double, logSlots C.int, level C.int, bsgsRatio C.int, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	p := params(ph)
	P := p.P
	if int(logSlots) < 0 || int(logSlots) > P.LogMaxSlots() {
		fail(codeArgument, "logSlots out of range")
	}
	if int(level) < 1 || int(level) > P.MaxLevel() {
		fail(codeArgument, "a linear transform needs level >= 1 (it consumes one rescale)")
	}
	slots := 1 << int(logSlots)
	nd := int(ndiag)
	ids := i64s(idx, nd)
	r, i := f64s(re, nd*slots), f64s(im, nd*slots)
	diags := lintrans.Diagonals[complex128]{}
	list := make([]int, 0, nd)
	for d := 0; d < nd; d++ {
		k := int(ids[d])
		if k < 0 || k >= slots {
			fail(codeArgument, "diagonal index %d out of [0, %d)", k, slots)
		}
		if _, dup := diags[k]; dup {
			fail(codeArgument, "diagonal %d given twice", k)
		}
		v := make([]complex128, slots)
		for s := 0; s < slots; s++ {
			v[s] = complex(r[d*slots+s], i[d*slots+s])
		}
		diags[k] = v
		list = append(list, k)
	}
	ltp := lintrans.Parameters{
		DiagonalsIndexList:        list,
		LevelQ:                    int(level),
		LevelP:                    P.MaxLevelP(),
		Scale:                     rlwe.NewScale(P.Q()[int(level)]),
		LogDimensions:             he.RingDims(int(logSlots)),
		LogBabyStepGiantStepRatio: int(bsgsRatio),
	}
	lt := lintrans.NewTransformation(P, ltp)
	var err error
	withLock(&p.mu, func() { err = lintrans.Encode(p.enc, diags, lt) })
	check(err, codeHE, "encode linear transform")
	*out = C.uint64_t(put(&LT{uint64(ph), lt}))
	return codeOK
}

//export he_lt_galois
func he_lt_galois(ph C.uint64_t, lth C.uint64_t, out *C.uint64_t, nout C.int, written *C.int, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	lt := getOwned[*LT](ph, lth, "linear transform")
	els := lt.v.GaloisElements(params(ph).P)
	dst := u64s(out, int(nout))
	if len(dst) < len(els) {
		fail(codeArgument, "buffer too small")
	}
	copy(dst, els)
	*written = C.int(len(els))
	return codeOK
}

// he_lt_eval evaluates the transform (no rescale: the caller rescales).
//
//export he_lt_eval
func he_lt_eval(ph C.uint64_t, evh C.uint64_t, ah C.uint64_t, lth C.uint64_t, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	e := getEval(ph, evh)
	a := getCT(ph, ah)
	lt := getOwned[*LT](ph, lth, "linear transform")
	if a.v.Degree() != 1 {
		fail(codeArgument, "linear transform needs a degree-1 ciphertext")
	}
	if a.v.LogDimensions.Cols != lt.v.LogDimensions.Cols {
		fail(codeArgument, "ciphertext has 2^%d slots, transform expects 2^%d", a.v.LogDimensions.Cols, lt.v.LogDimensions.Cols)
	}
	e.requireGalois(lt.v.GaloisElements(params(ph).P), "this linear transform")
	var ct *rlwe.Ciphertext
	var err error
	withLock(&e.mu, func() { ct, err = e.lt.EvaluateNew(a.v, lt.v) })
	check(err, codeHE, "linear transform")
	newCT(ph, ct, out)
	return codeOK
}
