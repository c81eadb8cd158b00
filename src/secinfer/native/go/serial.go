package main

/*
#include <stdint.h>
#include <stdlib.h>
*/
import "C"

import (
	"encoding/binary"
	"math"

	"github.com/tuneinsight/lattigo/v6/core/rlwe"
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

func checkMeta(P ckksParams, m *rlwe.MetaData, what string) {
	if m == nil {
		fail(codeSerial, "%s has no metadata", what)
	}
	if m.LogDimensions.Rows != 0 || m.LogDimensions.Cols < 0 || m.LogDimensions.Cols > P.LogMaxSlots() {
		fail(codeSerial, "%s: slot dimensions do not match the parameter set", what)
	}
	if !m.IsNTT || m.IsMontgomery {
		fail(codeSerial, "%s: must be in the NTT, non-Montgomery domain", what)
	}
	s := m.Scale.Float64()
	if !(s > 0) || math.IsInf(s, 0) || math.IsNaN(s) {
		fail(codeSerial, "%s: invalid scale", what)
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
