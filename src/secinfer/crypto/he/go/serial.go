package main

/*
#include <stdint.h>
#include <stdlib.h>
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/tuneinsight/lattigo/v6/core/rlwe"
	"github.com/tuneinsight/lattigo/v6/ring"
	"github.com/tuneinsight/lattigo/v6/ring/ringqp"
)

// Object kinds on the wire (mirrored in secinfer/crypto/he/serial.py).
const (
	kindSK  = 1
	kindPK  = 2
	kindEVK = 3
	kindPT  = 4
	kindCT  = 5
	kindLWE = 6
)

//export he_marshal
func he_marshal(ph C.uint64_t, h C.uint64_t, kind *C.int, out **C.uchar, outlen *C.size_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	var b []byte
	var err error
	switch o := getAny(uint64(h)).(type) {
	case *SK:
		bound(uint64(ph), o.ph, "secret key")
		b, err = o.v.MarshalBinary()
		*kind = kindSK
	case *PK:
		bound(uint64(ph), o.ph, "public key")
		b, err = o.v.MarshalBinary()
		*kind = kindPK
	case *EvalKeys:
		bound(uint64(ph), o.ph, "evaluation keys")
		b, err = o.v.MarshalBinary()
		*kind = kindEVK
	case *PT:
		bound(uint64(ph), o.ph, "plaintext")
		b, err = o.v.MarshalBinary()
		*kind = kindPT
	case *CT:
		bound(uint64(ph), o.ph, "ciphertext")
		b, err = o.v.MarshalBinary()
		*kind = kindCT
	case *LWEBatch:
		bound(uint64(ph), o.ph, "LWE batch")
		b = marshalLWE(o)
		*kind = kindLWE
	default:
		fail(codeArgument, "handle %d (%T) cannot be serialised", h, o)
	}
	check(err, codeHE, "marshal")
	outBytes(b, out, outlen)
	return codeOK
}

func checkPolyQ(P ckksParams, p ring.Poly, what string) {
	if p.N() != P.N() {
		fail(codeSerial, "%s has ring degree %d, parameter set has %d", what, p.N(), P.N())
	}
	if p.Level() < 0 || p.Level() > P.MaxLevel() {
		fail(codeSerial, "%s has %d moduli, parameter set has %d", what, p.Level()+1, P.QCount())
	}
	checkCoeffs(p, P.Q(), what)
}

func checkCoeffs(p ring.Poly, moduli []uint64, what string) {
	for l, row := range p.Coeffs {
		if len(row) != len(p.Coeffs[0]) {
			fail(codeSerial, "%s: ragged coefficient matrix", what)
		}
		q := moduli[l]
		for _, c := range row {
			if c >= q {
				fail(codeSerial, "%s: coefficient not reduced modulo q_%d", what, l)
			}
		}
	}
}

func checkPolyQP(P ckksParams, p ringqp.Poly, what string) {
	if p.Q.N() != P.N() || p.Q.Level() > P.MaxLevelQ() {
		fail(codeSerial, "%s: Q part does not match the parameter set", what)
	}
	checkCoeffs(p.Q, P.Q(), what)
	if P.PCount() > 0 {
		if p.P.N() != P.N() || p.P.Level() > P.MaxLevelP() {
			fail(codeSerial, "%s: P part does not match the parameter set", what)
		}
		checkCoeffs(p.P, P.P(), what)
	}
}

func checkMeta(P ckksParams, m *rlwe.MetaData, what string) {
	if m == nil {
		fail(codeSerial, "%s has no metadata", what)
	}
	if m.LogDimensions.Rows != 0 || m.LogDimensions.Cols < 0 || m.LogDimensions.Cols > P.LogMaxSlots() {
		fail(codeSerial, "%s: slot dimensions do not match the parameter set", what)
	}
	s := m.Scale.Float64()
	if !(s > 0) || math.IsInf(s, 0) || math.IsNaN(s) {
		fail(codeSerial, "%s: invalid scale", what)
	}
}

func checkGadget(P ckksParams, g *rlwe.GadgetCiphertext, what string) {
	if len(g.Value) == 0 {
		fail(codeSerial, "%s: empty gadget ciphertext", what)
	}
	for _, row := range g.Value {
		for _, v := range row {
			if len(v) != 2 {
				fail(codeSerial, "%s: gadget entry of degree %d", what, len(v)-1)
			}
			for _, p := range v {
				checkPolyQP(P, p, what)
			}
		}
	}
}

// safeUnmarshal runs Lattigo's decoder with panics mapped to serialisation errors.
func safeUnmarshal(f func() error, what string) {
	func() {
		defer func() {
			if r := recover(); r != nil {
				fail(codeSerial, "%s: malformed bytes (%v)", what, r)
			}
		}()
		if err := f(); err != nil {
			fail(codeSerial, "%s: %v", what, err)
		}
	}()
}

//export he_unmarshal
func he_unmarshal(ph C.uint64_t, kind C.int, data *C.uchar, n C.size_t, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	b := inBytes(data, n)
	var obj any
	switch kind {
	case kindSK:
		sk := new(rlwe.SecretKey)
		safeUnmarshal(func() error { return sk.UnmarshalBinary(b) }, "secret key")
		checkPolyQP(P, sk.Value, "secret key")
		if sk.Value.Q.Level() != P.MaxLevelQ() {
			fail(codeSerial, "secret key has the wrong number of moduli")
		}
		obj = &SK{uint64(ph), sk}
	case kindPK:
		pk := new(rlwe.PublicKey)
		safeUnmarshal(func() error { return pk.UnmarshalBinary(b) }, "public key")
		if len(pk.Value) != 2 {
			fail(codeSerial, "public key must have two components")
		}
		for _, p := range pk.Value {
			checkPolyQP(P, p, "public key")
			if p.Q.Level() != P.MaxLevelQ() {
				fail(codeSerial, "public key has the wrong number of moduli")
			}
		}
		obj = &PK{uint64(ph), pk}
	case kindEVK:
		evk := new(rlwe.MemEvaluationKeySet)
		safeUnmarshal(func() error { return evk.UnmarshalBinary(b) }, "evaluation keys")
		if evk.RelinearizationKey != nil {
			checkGadget(P, &evk.RelinearizationKey.GadgetCiphertext, "relinearisation key")
		}
		for g, gk := range evk.GaloisKeys {
			if gk == nil || gk.GaloisElement != g || g%2 == 0 || g >= uint64(2*P.N()) || gk.NthRoot != uint64(2*P.N()) {
				fail(codeSerial, "Galois key %d does not match the parameter set", g)
			}
			checkGadget(P, &gk.GadgetCiphertext, fmt.Sprintf("Galois key %d", g))
		}
		obj = &EvalKeys{uint64(ph), evk}
	case kindPT:
		pt := new(rlwe.Plaintext)
		safeUnmarshal(func() error { return pt.UnmarshalBinary(b) }, "plaintext")
		checkMeta(P, pt.MetaData, "plaintext")
		checkPolyQ(P, pt.Value, "plaintext")
		obj = &PT{uint64(ph), pt}
	case kindCT:
		ct := new(rlwe.Ciphertext)
		safeUnmarshal(func() error { return ct.UnmarshalBinary(b) }, "ciphertext")
		checkMeta(P, ct.MetaData, "ciphertext")
		if len(ct.Value) < 2 || len(ct.Value) > 3 {
			fail(codeSerial, "ciphertext of degree %d", len(ct.Value)-1)
		}
		for _, p := range ct.Value {
			checkPolyQ(P, p, "ciphertext")
			if p.Level() != ct.Value[0].Level() {
				fail(codeSerial, "ciphertext components at different levels")
			}
		}
		obj = &CT{uint64(ph), ct}
	case kindLWE:
		obj = unmarshalLWE(uint64(ph), P, b)
	default:
		fail(codeArgument, "unknown object kind %d", kind)
	}
	*out = C.uint64_t(put(obj))
	return codeOK
}

// LWE batch wire format: "LWE1", u32 count, u32 logN, u32 level, f64 log2(scale), then
// for each member and level: b, the N coefficients of c1 (constant-term RLWE form).
func marshalLWE(b *LWEBatch) []byte {
	P := get[*Params](b.ph, "parameter set").P
	N, L := P.N(), b.level+1
	out := make([]byte, 0, 24+len(b.cts)*L*(N+1)*8)
	out = append(out, 'L', 'W', 'E', '1')
	out = binary.LittleEndian.AppendUint32(out, uint32(len(b.cts)))
	out = binary.LittleEndian.AppendUint32(out, uint32(P.LogN()))
	out = binary.LittleEndian.AppendUint32(out, uint32(b.level))
	ls := 0.0
	if len(b.cts) > 0 {
		ls = b.cts[0].Scale.Log2()
	}
	out = binary.LittleEndian.AppendUint64(out, math.Float64bits(ls))
	for _, ct := range b.cts {
		for l := 0; l < L; l++ {
			out = binary.LittleEndian.AppendUint64(out, ct.Value[0].Coeffs[l][0])
			for _, c := range ct.Value[1].Coeffs[l] {
				out = binary.LittleEndian.AppendUint64(out, c)
			}
		}
	}
	return out
}

func unmarshalLWE(ph uint64, P ckksParams, b []byte) *LWEBatch {
	if len(b) < 24 || string(b[:4]) != "LWE1" {
		fail(codeSerial, "not an LWE batch")
	}
	count := int(binary.LittleEndian.Uint32(b[4:]))
	logN := int(binary.LittleEndian.Uint32(b[8:]))
	level := int(binary.LittleEndian.Uint32(b[12:]))
	logScale := math.Float64frombits(binary.LittleEndian.Uint64(b[16:]))
	if logN != P.LogN() {
		fail(codeSerial, "LWE batch has logN %d, parameter set has %d", logN, P.LogN())
	}
	if level > P.MaxLevel() {
		fail(codeSerial, "LWE batch level %d too high", level)
	}
	if math.IsNaN(logScale) || math.IsInf(logScale, 0) || logScale < -1100 || logScale > 1100 {
		fail(codeSerial, "LWE batch scale invalid")
	}
	N, L := P.N(), level+1
	want := 24 + count*L*(N+1)*8
	if count < 0 || count > 1<<20 || len(b) != want {
		fail(codeSerial, "LWE batch has %d bytes, header implies %d", len(b), want)
	}
	res := &LWEBatch{ph: ph, level: level}
	off := 24
	for t := 0; t < count; t++ {
		ct := rlwe.NewCiphertext(P, 1, level)
		ct.IsNTT = false
		ct.Scale = rlwe.NewScale(math.Exp2(logScale))
		for l := 0; l < L; l++ {
			q := P.Q()[l]
			v := binary.LittleEndian.Uint64(b[off:])
			off += 8
			if v >= q {
				fail(codeSerial, "LWE value not reduced modulo q_%d", l)
			}
			ct.Value[0].Coeffs[l][0] = v
			row := ct.Value[1].Coeffs[l]
			for j := 0; j < N; j++ {
				v = binary.LittleEndian.Uint64(b[off:])
				off += 8
				if v >= q {
					fail(codeSerial, "LWE value not reduced modulo q_%d", l)
				}
				row[j] = v
			}
		}
		res.cts = append(res.cts, ct)
	}
	return res
}
