package he

import (
	"github.com/tuneinsight/lattigo/v6/core/rlwe"
	"github.com/tuneinsight/lattigo/v6/ring"
	"github.com/tuneinsight/lattigo/v6/schemes/ckks"

	"secinfer/native/internal/status"
)

// Trimmed ciphertexts: what a key owner needs to read chosen coefficients of the
// decryption m = c0 + c1 s of a degree-1 ciphertext. Coefficient j of m depends on
// coefficient j of c0 and on all of c1, so the frame holds
//
//	c0 at the positions, coefficient domain: for each level l, count residues mod q_l
//	c1 in full, NTT domain (as Lattigo stores it): for each level l, N residues mod q_l
//
// every row packed at its prime's bit width as in wire.go (WritePolys). No header: the
// level and the positions are known to both sides, so the exact length is too (TrimLen),
// and the reader refuses any other length, unreduced residues and non-zero padding bits.

func trimRefs(P ckks.Parameters, c0 ring.Poly, c1 ring.Poly) []PolyRef {
	moduli := P.Q()[:c1.Level()+1]
	return []PolyRef{{c0, moduli}, {c1, moduli}}
}

// TrimLen is the exact byte length of a trimmed frame at level for count positions.
func TrimLen(P ckks.Parameters, level, count int) int {
	n := 0
	for _, q := range P.Q()[:level+1] {
		n += RowBytes(count, q) + RowBytes(P.N(), q)
	}
	return n
}

// Positions checks 1..2N coefficient positions in [0, N).
func Positions(P ckks.Parameters, pos []int64) []int {
	if len(pos) < 1 || len(pos) > 2*P.N() {
		status.Fail(status.Argument, "between 1 and 2N positions, got %d", len(pos))
	}
	out := make([]int, len(pos))
	for i, p := range pos {
		if p < 0 || p >= int64(P.N()) {
			status.Fail(status.Argument, "position %d outside [0, N)", p)
		}
		out[i] = int(p)
	}
	return out
}

// Trim serialises a degree-1 NTT ciphertext as a trimmed frame for the positions
// (coefficients of c0 taken out of the NTT domain).
func Trim(P ckks.Parameters, ct *rlwe.Ciphertext, pos []int64) []byte {
	if ct.Degree() != 1 || !ct.IsNTT {
		status.Fail(status.Argument, "trimming needs a degree-1 ciphertext in the NTT domain")
	}
	idx := Positions(P, pos)
	level := ct.Level()
	r := P.RingQ().AtLevel(level)
	c0 := r.NewPoly()
	r.INTT(ct.Value[0], c0)
	sel := ring.NewPoly(len(idx), level)
	for l := range sel.Coeffs {
		row := c0.Coeffs[l]
		for i, j := range idx {
			sel.Coeffs[l][i] = row[j]
		}
	}
	b := make([]byte, 0, TrimLen(P, level, len(idx)))
	return WritePolys(b, trimRefs(P, sel, ct.Value[1]))
}

// DecryptTrimmed reads a trimmed frame at level and writes the coefficient-domain
// residues of m = c0 + c1 s at the positions: dst[l*count + i] = m_{idx[i]} mod q_l.
func DecryptTrimmed(P ckks.Parameters, sk *rlwe.SecretKey, b []byte, lv int, idx []int, dst []uint64) {
	if want := TrimLen(P, lv, len(idx)); len(b) != want {
		status.Fail(status.Serial, "trimmed ciphertext: %d bytes, the level and positions imply %d", len(b), want)
	}
	r := P.RingQ().AtLevel(lv)
	sel := ring.NewPoly(len(idx), lv)
	c1 := r.NewPoly()
	ReadPolys(b, trimRefs(P, sel, c1), "trimmed ciphertext")
	// c1 s in the NTT domain (the secret key is kept in NTT and Montgomery form), then
	// back to coefficients; only the positions are used.
	r.MulCoeffsMontgomery(c1, sk.Value.Q, c1)
	r.INTT(c1, c1)
	for l, q := range P.Q()[:lv+1] {
		row := c1.Coeffs[l]
		for i, j := range idx {
			v := row[j] + sel.Coeffs[l][i] // both < q < 2^61: no overflow
			if v >= q {
				v -= q
			}
			dst[l*len(idx)+i] = v
		}
	}
}

// Raw residue polynomials (e.g. crisp's pk0, sent as coefficient residues): one polynomial
// of N coefficients at level, every row packed at its prime's width (WritePolys), no
// header; the reader knows the level, so the exact length.

func rawRefs(P ckks.Parameters, level int, in []uint64) []PolyRef {
	N := P.N()
	rows := make([][]uint64, level+1)
	for l := range rows {
		rows[l] = in[l*N : (l+1)*N]
	}
	return []PolyRef{{ring.Poly{Coeffs: rows}, P.Q()[:level+1]}}
}

// PackPoly packs (level + 1) x N residues; each must be below its prime.
func PackPoly(P ckks.Parameters, level int, in []uint64) []byte {
	refs := rawRefs(P, level, in)
	for l, row := range refs[0].P.Coeffs {
		for _, c := range row {
			if c >= refs[0].Moduli[l] {
				status.Fail(status.Argument, "residue not reduced modulo prime %d", l)
			}
		}
	}
	return WritePolys(make([]byte, 0, PolysSize(refs)), refs)
}

// UnpackPoly reads a packed polynomial at level into out ((level + 1) x N): a
// serialisation error for any other length, an unreduced residue or non-zero padding.
func UnpackPoly(P ckks.Parameters, level int, b []byte, out []uint64) {
	readExact(b, rawRefs(P, level, out), "packed polynomial")
}
