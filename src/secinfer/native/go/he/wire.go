// Package he holds secinfer's HE logic over Lattigo v6 types: the wire format of keys,
// plaintexts, ciphertexts and LWE batches, coefficient encoding, LWE extraction and
// packing helpers, trimmed ciphertexts, caller-visible encryption randomness, and the
// fast ciphertext x plaintext paths. It has no cgo: the exports (package main) convert
// C arguments, resolve handles and call in here. Failures panic with status.Fail, which
// every export turns into a status code.
package he

import (
	"encoding/binary"
	"math"
	"math/bits"
	"sort"

	"github.com/tuneinsight/lattigo/v6/core/rlwe"
	"github.com/tuneinsight/lattigo/v6/ring"
	"github.com/tuneinsight/lattigo/v6/ring/ringqp"
	"github.com/tuneinsight/lattigo/v6/schemes/ckks"

	"secinfer/native/internal/status"
)

// Object kinds on the wire (mirrored in secinfer/crypto/he/serial.py).
const (
	KindSK  = 1
	KindPK  = 2
	KindEVK = 3
	KindPT  = 4
	KindCT  = 5
	KindLWE = 6
)

// Wire format of every object: a 4-byte tag, small uint32 shape fields, (for plaintexts
// and ciphertexts) a length-prefixed metadata blob of at most 4 KiB, then the raw residues
// of every polynomial in a fixed order. The reader builds a template of the expected shape
// from the parameter set first, so the exact byte length is known before anything is read
// and no length field from the input ever sizes an allocation (a hostile peer cannot make
// the process allocate more than its message size).

// PolyRef is one polynomial and the primes of its rows.
type PolyRef struct {
	P      ring.Poly
	Moduli []uint64
}

func refsQP(P ckks.Parameters, v ringqp.Poly, out []PolyRef) []PolyRef {
	out = append(out, PolyRef{v.Q, P.Q()})
	if P.PCount() > 0 {
		out = append(out, PolyRef{v.P, P.P()})
	}
	return out
}

func refsGadget(P ckks.Parameters, g *rlwe.GadgetCiphertext, out []PolyRef) []PolyRef {
	for _, row := range g.Value {
		for _, v := range row {
			for _, p := range v {
				out = refsQP(P, p, out)
			}
		}
	}
	return out
}

// Each residue row is written at w = bitlen(q) bits per coefficient (its prime's width,
// not 64), LSB first, little-endian, the row padded to a whole byte with zero bits: a
// ciphertext at ckks-n14-128's top level takes 300 instead of 448 bits per coefficient.

// RowBytes is the packed size of one row of n residues mod q.
func RowBytes(n int, q uint64) int { return (n*bits.Len64(q) + 7) / 8 }

// PolysSize is the packed size of refs.
func PolysSize(refs []PolyRef) int {
	n := 0
	for _, r := range refs {
		for l := range r.P.Coeffs {
			n += RowBytes(r.P.N(), r.Moduli[l])
		}
	}
	return n
}

// WritePolys appends the packed rows of refs to out.
func WritePolys(out []byte, refs []PolyRef) []byte {
	for _, r := range refs {
		for l, row := range r.P.Coeffs {
			w := uint(bits.Len64(r.Moduli[l]))
			var acc uint64
			var nb uint
			for _, c := range row {
				acc |= c << nb
				if nb+w >= 64 {
					out = binary.LittleEndian.AppendUint64(out, acc)
					acc = c >> (64 - nb) // Go: a shift by 64 gives 0
					nb = nb + w - 64
				} else {
					nb += w
				}
			}
			for ; nb > 0; nb -= min(nb, 8) {
				out = append(out, byte(acc))
				acc >>= 8
			}
		}
	}
	return out
}

// ReadPolys fills refs from packed rows, refusing unreduced residues and padding bits.
func ReadPolys(b []byte, refs []PolyRef, what string) {
	off := 0
	for _, r := range refs {
		for l, row := range r.P.Coeffs {
			q := r.Moduli[l]
			w := uint(bits.Len64(q))
			mask := uint64(1)<<w - 1
			nbytes := RowBytes(len(row), q)
			buf := make([]byte, nbytes+9) // zero tail: 9-byte reads never leave the buffer
			copy(buf, b[off:off+nbytes])
			off += nbytes
			for j := range row {
				p := uint(j) * w
				i, sh := p>>3, p&7
				v := binary.LittleEndian.Uint64(buf[i:]) >> sh
				if sh+w > 64 {
					v |= uint64(buf[i+8]) << (64 - sh)
				}
				if v &= mask; v >= q {
					status.Fail(status.Serial, "%s: coefficient not reduced modulo its prime", what)
				}
				row[j] = v
			}
			if used := uint(len(row)) * w; used%8 != 0 && buf[nbytes-1]>>(used%8) != 0 {
				status.Fail(status.Serial, "%s: non-zero padding bits", what)
			}
		}
	}
}

// ReadExact reads refs from b after checking b has exactly their packed length.
func ReadExact(b []byte, refs []PolyRef, what string) {
	if want := PolysSize(refs); len(b) != want {
		status.Fail(status.Serial, "%s: %d bytes of coefficients, the parameter set implies %d", what, len(b), want)
	}
	ReadPolys(b, refs, what)
}

func header(tag string, fields ...uint32) []byte {
	out := []byte(tag)
	for _, f := range fields {
		out = binary.LittleEndian.AppendUint32(out, f)
	}
	return out
}

func readHeader(b []byte, tag string, nfields int, what string) ([]uint32, []byte) {
	if len(b) < 4+4*nfields || string(b[:4]) != tag {
		status.Fail(status.Serial, "not a serialised %s", what)
	}
	f := make([]uint32, nfields)
	for i := range f {
		f[i] = binary.LittleEndian.Uint32(b[4+4*i:])
	}
	return f, b[4+4*nfields:]
}

func checkMeta(P ckks.Parameters, m *rlwe.MetaData, what string) {
	if m == nil {
		status.Fail(status.Serial, "%s has no metadata", what)
	}
	if m.LogDimensions.Rows != 0 || m.LogDimensions.Cols < 0 || m.LogDimensions.Cols > P.LogMaxSlots() {
		status.Fail(status.Serial, "%s: slot dimensions do not match the parameter set", what)
	}
	if !m.IsNTT || m.IsMontgomery {
		status.Fail(status.Serial, "%s: must be in the NTT, non-Montgomery domain", what)
	}
	s := m.Scale.Float64()
	if !(s > 0) || math.IsInf(s, 0) || math.IsNaN(s) {
		status.Fail(status.Serial, "%s: invalid scale", what)
	}
}

// safeUnmarshal runs Lattigo's decoder with panics mapped to serialisation errors.
func safeUnmarshal(f func() error, what string) {
	func() {
		defer func() {
			if r := recover(); r != nil {
				status.Fail(status.Serial, "%s: malformed bytes (%v)", what, r)
			}
		}()
		if err := f(); err != nil {
			status.Fail(status.Serial, "%s: %v", what, err)
		}
	}()
}

// ---------------------------------------------------------------- keys

// MarshalSK writes a secret key (Q and P parts).
func MarshalSK(P ckks.Parameters, sk *rlwe.SecretKey) []byte {
	return WritePolys(header("SK01"), refsQP(P, sk.Value, nil))
}

// UnmarshalSK reads a secret key.
func UnmarshalSK(P ckks.Parameters, b []byte) *rlwe.SecretKey {
	_, rest := readHeader(b, "SK01", 0, "secret key")
	sk := rlwe.NewSecretKey(P)
	ReadExact(rest, refsQP(P, sk.Value, nil), "secret key")
	return sk
}

// MarshalPK writes a public key (both components, Q and P parts).
func MarshalPK(P ckks.Parameters, pk *rlwe.PublicKey) []byte {
	return WritePolys(header("PK01"), refsQP(P, pk.Value[1], refsQP(P, pk.Value[0], nil)))
}

// UnmarshalPK reads a public key.
func UnmarshalPK(P ckks.Parameters, b []byte) *rlwe.PublicKey {
	_, rest := readHeader(b, "PK01", 0, "public key")
	pk := rlwe.NewPublicKey(P)
	ReadExact(rest, refsQP(P, pk.Value[1], refsQP(P, pk.Value[0], nil)), "public key")
	return pk
}

// MarshalEvalKeys writes the relinearisation key (if any) and the Galois keys in
// increasing order of their element.
func MarshalEvalKeys(P ckks.Parameters, evk *rlwe.MemEvaluationKeySet) []byte {
	els := evk.GetGaloisKeysList()
	sort.Slice(els, func(i, j int) bool { return els[i] < els[j] })
	hasRlk := uint32(0)
	var refs []PolyRef
	if evk.RelinearizationKey != nil {
		hasRlk = 1
		refs = refsGadget(P, &evk.RelinearizationKey.GadgetCiphertext, refs)
	}
	b := header("EK01", hasRlk, uint32(len(els)))
	for _, g := range els {
		b = binary.LittleEndian.AppendUint64(b, g)
		gk, err := evk.GetGaloisKey(g)
		status.Check(err, status.HE, "Galois key")
		refs = refsGadget(P, &gk.GadgetCiphertext, refs)
	}
	return WritePolys(b, refs)
}

// UnmarshalEvalKeys reads evaluation keys of the layout evkp (see EvalKeyParams).
func UnmarshalEvalKeys(P ckks.Parameters, evkp []rlwe.EvaluationKeyParameters, b []byte) *rlwe.MemEvaluationKeySet {
	f, rest := readHeader(b, "EK01", 2, "evaluation keys")
	hasRlk, ngal := f[0], int(f[1])
	if hasRlk > 1 || ngal > 2*P.N() || len(rest) < 8*ngal {
		status.Fail(status.Serial, "evaluation keys: malformed header")
	}
	var refs []PolyRef
	var rlk *rlwe.RelinearizationKey
	if hasRlk == 1 {
		rlk = rlwe.NewRelinearizationKey(P, evkp...)
		refs = refsGadget(P, &rlk.GadgetCiphertext, refs)
	}
	// Size check before allocating the Galois key templates.
	perKey := PolysSize(refsGadget(P, &rlwe.NewGaloisKey(P, evkp...).GadgetCiphertext, nil))
	if len(rest)-8*ngal != PolysSize(refs)+ngal*perKey {
		status.Fail(status.Serial, "evaluation keys: length does not match %d Galois keys", ngal)
	}
	var gks []*rlwe.GaloisKey
	seen := map[uint64]bool{}
	for i := 0; i < ngal; i++ {
		g := binary.LittleEndian.Uint64(rest[8*i:])
		if g%2 == 0 || g <= 1 || g >= uint64(2*P.N()) || seen[g] {
			status.Fail(status.Serial, "evaluation keys: invalid Galois element %d", g)
		}
		seen[g] = true
		gk := rlwe.NewGaloisKey(P, evkp...)
		gk.GaloisElement, gk.NthRoot = g, uint64(2*P.N())
		gks = append(gks, gk)
		refs = refsGadget(P, &gk.GadgetCiphertext, refs)
	}
	ReadExact(rest[8*ngal:], refs, "evaluation keys")
	return rlwe.NewMemEvaluationKeySet(rlk, gks...)
}

// ---------------------------------------------------------------- plaintexts, ciphertexts

// MarshalElement writes a plaintext ("PT01", degree 0) or ciphertext ("CT01").
func MarshalElement(tag string, degree int, meta *rlwe.MetaData, polys []ring.Poly, P ckks.Parameters) []byte {
	mb, err := meta.MarshalBinary()
	status.Check(err, status.HE, "metadata")
	refs := make([]PolyRef, 0, len(polys))
	for _, p := range polys {
		refs = append(refs, PolyRef{p, P.Q()})
	}
	hdr := header(tag, uint32(degree), uint32(polys[0].Level()), uint32(len(mb)))
	out := make([]byte, 0, len(hdr)+len(mb)+PolysSize(refs)) // one allocation, no regrowth
	out = append(append(out, hdr...), mb...)
	return WritePolys(out, refs)
}

// readElement validates shape and metadata and returns (degree, level, metadata, poly bytes).
func readElement(b []byte, tag string, maxDegree int, P ckks.Parameters, what string) (int, int, *rlwe.MetaData, []byte) {
	f, rest := readHeader(b, tag, 3, what)
	degree, level, mlen := int(f[0]), int(f[1]), int(f[2])
	if degree > maxDegree || level > P.MaxLevel() || mlen > 4096 || mlen > len(rest) {
		status.Fail(status.Serial, "%s: shape does not match the parameter set", what)
	}
	meta := &rlwe.MetaData{}
	safeUnmarshal(func() error { return meta.UnmarshalBinary(rest[:mlen]) }, what+" metadata")
	checkMeta(P, meta, what)
	return degree, level, meta, rest[mlen:]
}

// UnmarshalPT reads a plaintext.
func UnmarshalPT(P ckks.Parameters, b []byte) *rlwe.Plaintext {
	_, level, meta, rest := readElement(b, "PT01", 0, P, "plaintext")
	pt := rlwe.NewPlaintext(P, level)
	*pt.MetaData = *meta
	ReadExact(rest, []PolyRef{{pt.Value, P.Q()}}, "plaintext")
	return pt
}

// UnmarshalCT reads a ciphertext of degree 1 or 2.
func UnmarshalCT(P ckks.Parameters, b []byte) *rlwe.Ciphertext {
	degree, level, meta, rest := readElement(b, "CT01", 2, P, "ciphertext")
	if degree < 1 {
		status.Fail(status.Serial, "ciphertext of degree 0")
	}
	ct := rlwe.NewCiphertext(P, degree, level)
	*ct.MetaData = *meta
	refs := make([]PolyRef, 0, degree+1)
	for _, p := range ct.Value {
		refs = append(refs, PolyRef{p, P.Q()})
	}
	ReadExact(rest, refs, "ciphertext")
	return ct
}

// ---------------------------------------------------------------- LWE batches

// LWE batch wire format: "LWE1", u32 count, u32 logN, u32 level, f64 log2(scale), then
// for each member and level: b, the N coefficients of c1 (constant-term RLWE form).

// MarshalLWE writes an LWE batch at level.
func MarshalLWE(P ckks.Parameters, level int, cts []*rlwe.Ciphertext) []byte {
	N, L := P.N(), level+1
	out := make([]byte, 0, 24+len(cts)*L*(N+1)*8)
	out = append(out, 'L', 'W', 'E', '1')
	out = binary.LittleEndian.AppendUint32(out, uint32(len(cts)))
	out = binary.LittleEndian.AppendUint32(out, uint32(P.LogN()))
	out = binary.LittleEndian.AppendUint32(out, uint32(level))
	ls := 0.0
	if len(cts) > 0 {
		ls = cts[0].Scale.Log2()
	}
	out = binary.LittleEndian.AppendUint64(out, math.Float64bits(ls))
	for _, ct := range cts {
		for l := 0; l < L; l++ {
			out = binary.LittleEndian.AppendUint64(out, ct.Value[0].Coeffs[l][0])
			for _, c := range ct.Value[1].Coeffs[l] {
				out = binary.LittleEndian.AppendUint64(out, c)
			}
		}
	}
	return out
}

// UnmarshalLWE reads an LWE batch: its level and members.
func UnmarshalLWE(P ckks.Parameters, b []byte) (int, []*rlwe.Ciphertext) {
	if len(b) < 24 || string(b[:4]) != "LWE1" {
		status.Fail(status.Serial, "not an LWE batch")
	}
	count := int(binary.LittleEndian.Uint32(b[4:]))
	logN := int(binary.LittleEndian.Uint32(b[8:]))
	level := int(binary.LittleEndian.Uint32(b[12:]))
	logScale := math.Float64frombits(binary.LittleEndian.Uint64(b[16:]))
	if logN != P.LogN() {
		status.Fail(status.Serial, "LWE batch has logN %d, parameter set has %d", logN, P.LogN())
	}
	if level > P.MaxLevel() {
		status.Fail(status.Serial, "LWE batch level %d too high", level)
	}
	if math.IsNaN(logScale) || math.IsInf(logScale, 0) || logScale < -1100 || logScale > 1100 {
		status.Fail(status.Serial, "LWE batch scale invalid")
	}
	N, L := P.N(), level+1
	want := 24 + count*L*(N+1)*8
	if count < 0 || count > 1<<20 || len(b) != want {
		status.Fail(status.Serial, "LWE batch has %d bytes, header implies %d", len(b), want)
	}
	var cts []*rlwe.Ciphertext
	off := 24
	for t := 0; t < count; t++ {
		ct := lweMember(P, level, logScale)
		for l := 0; l < L; l++ {
			q := P.Q()[l]
			ct.Value[0].Coeffs[l][0] = lweResidue(binary.LittleEndian.Uint64(b[off:]), q, l)
			off += 8
			row := ct.Value[1].Coeffs[l]
			for j := 0; j < N; j++ {
				row[j] = lweResidue(binary.LittleEndian.Uint64(b[off:]), q, l)
				off += 8
			}
		}
		cts = append(cts, ct)
	}
	return level, cts
}

// ---------------------------------------------------------------- trimmed ciphertexts

// Trimmed ciphertexts: what a key owner needs to read chosen coefficients of the
// decryption m = c0 + c1 s of a degree-1 ciphertext. Coefficient j of m depends on
// coefficient j of c0 and on all of c1, so the frame holds
//
//	c0 at the positions, coefficient domain: for each level l, count residues mod q_l
//	c1 in full, NTT domain (as Lattigo stores it): for each level l, N residues mod q_l
//
// every row packed at its prime's bit width (WritePolys). No header: the
// level and the positions are known to both sides, so the exact length is too (TrimLen),
// and the reader refuses any other length, unreduced residues and non-zero padding bits.

// TrimRefs are the rows of a trimmed frame: c0 at the positions, then c1.
func TrimRefs(P ckks.Parameters, c0 ring.Poly, c1 ring.Poly) []PolyRef {
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
	return WritePolys(b, TrimRefs(P, sel, ct.Value[1]))
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
	ReadPolys(b, TrimRefs(P, sel, c1), "trimmed ciphertext")
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
	ReadExact(b, rawRefs(P, level, out), "packed polynomial")
}
