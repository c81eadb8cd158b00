package he

import (
	"math"
	"math/big"
	"math/bits"

	"github.com/tuneinsight/lattigo/v6/core/rlwe"
	"github.com/tuneinsight/lattigo/v6/ring"
	"github.com/tuneinsight/lattigo/v6/schemes/ckks"
	"github.com/tuneinsight/lattigo/v6/utils/sampling"

	"secinfer/native/internal/status"
)

// RingDims is the slot layout of a plaintext or ciphertext with 2^logSlots slots.
func RingDims(logSlots int) ring.Dimensions { return ring.Dimensions{Rows: 0, Cols: logSlots} }

// f64Residues writes an integral float64 x = mant * 2^e (|mant| < 2^53) into every RNS
// level as (mant mod q) * (2^e mod q) mod q: the same residues as converting x to a big.Int
// and reducing it, without allocating per coefficient.
type f64Residues struct {
	mods []uint64
	pow2 [][]uint64 // pow2[l][e] = 2^e mod q_l, e < 1024
}

func newF64Residues(r *ring.Ring) *f64Residues {
	f := &f64Residues{}
	for _, s := range r.SubRings[:r.Level()+1] {
		q := s.Modulus
		tab := make([]uint64, 1024)
		tab[0] = 1 % q
		for e := 1; e < 1024; e++ {
			hi, lo := bits.Mul64(tab[e-1], 2)
			tab[e] = bits.Rem64(hi, lo, q)
		}
		f.mods = append(f.mods, q)
		f.pow2 = append(f.pow2, tab)
	}
	return f
}

func (f *f64Residues) set(p ring.Poly, j int, x float64) {
	neg := x < 0
	if neg {
		x = -x
	}
	frac, e := math.Frexp(x) // x = frac * 2^e, frac in [0.5, 1)
	var mant uint64
	shift := 0
	if e <= 53 {
		mant = uint64(x) // exact: x is an integer below 2^53
	} else {
		mant = uint64(math.Ldexp(frac, 53)) // exact: 53-bit significand
		shift = e - 53
	}
	for l, q := range f.mods {
		hi, lo := bits.Mul64(mant%q, f.pow2[l][shift])
		v := bits.Rem64(hi, lo, q)
		if neg && v != 0 {
			v = q - v
		}
		p.Coeffs[l][j] = v
	}
}

// PolyFromInts returns the polynomial with the given signed coefficients at r's level.
func PolyFromInts(r *ring.Ring, vals []int64) ring.Poly {
	p := r.NewPoly()
	for l, s := range r.SubRings[:r.Level()+1] {
		q := s.Modulus
		for j, v := range vals {
			if v >= 0 {
				p.Coeffs[l][j] = uint64(v) % q
			} else {
				p.Coeffs[l][j] = (q - uint64(-v)%q) % q
			}
		}
	}
	return p
}

func centered(r *ring.Ring, p ring.Poly) []*big.Int {
	out := make([]*big.Int, r.N())
	for i := range out {
		out[i] = new(big.Int)
	}
	r.PolyToBigintCentered(p, 1, out)
	return out
}

// quo writes c / s as float64.
func quo(c *big.Int, s *big.Float) float64 {
	f, _ := new(big.Float).Quo(new(big.Float).SetInt(c), s).Float64()
	return f
}

// CheckLevel fails unless 0 <= level <= P.MaxLevel().
func CheckLevel(P ckks.Parameters, level int, code int) {
	if level < 0 || level > P.MaxLevel() {
		status.Fail(code, "level %d out of range", level)
	}
}

// ---------------------------------------------------------------- coefficient encoding

// CoeffEncode makes a plaintext whose polynomial coefficients are round(vals[j]*scale).
func CoeffEncode(P ckks.Parameters, vals []float64, level int, scale float64) *rlwe.Plaintext {
	CheckLevel(P, level, status.Argument)
	if len(vals) > P.N() {
		status.Fail(status.Argument, "%d coefficients exceed N = %d", len(vals), P.N())
	}
	if !(scale > 0) || math.IsInf(scale, 0) {
		status.Fail(status.Argument, "scale must be positive and finite")
	}
	r := P.RingQ().AtLevel(level)
	pt := rlwe.NewPlaintext(P, level)
	enc := newF64Residues(r)
	for j, v := range vals {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			status.Fail(status.Argument, "coefficient %d is not finite", j)
		}
		x := math.Round(v * scale)
		if math.IsInf(x, 0) {
			status.Fail(status.Argument, "coefficient %d overflows after scaling", j)
		}
		enc.set(pt.Value, j, x)
	}
	pt.Scale = rlwe.NewScale(scale)
	pt.IsBatched = false
	if pt.IsNTT {
		r.NTT(pt.Value, pt.Value)
	}
	return pt
}

// CoeffDecode writes the centred coefficients of pt divided by scale into dst (N entries,
// checked by the caller).
func CoeffDecode(P ckks.Parameters, pt *rlwe.Plaintext, scale float64, dst []float64) {
	r := P.RingQ().AtLevel(pt.Level())
	p := *pt.Value.CopyNew()
	if pt.IsNTT {
		r.INTT(p, p)
	}
	s := new(big.Float).SetFloat64(scale)
	for j, c := range centered(r, p) {
		dst[j] = quo(c, s)
	}
}

// ---------------------------------------------------------------- LWE batches
//
// LWE ciphertexts are held in "constant-term RLWE form" in the coefficient domain: c0 has
// only its constant coefficient set (b), and c1 is the polynomial whose product with s has
// <a, s> as constant coefficient. Decryption: b + <a, s> = m + e.  [SAFHIRE Sec. 2.1]

// LWEExtract moves coefficient i of a degree-1 ciphertext to the constant term of a
// member, for each i in idx.
func LWEExtract(P ckks.Parameters, ct *rlwe.Ciphertext, idx []int64) []*rlwe.Ciphertext {
	if ct.Degree() != 1 {
		status.Fail(status.Argument, "LWE extraction needs a degree-1 ciphertext")
	}
	level := ct.Level()
	r := P.RingQ().AtLevel(level)
	c0, c1 := *ct.Value[0].CopyNew(), *ct.Value[1].CopyNew()
	if ct.IsNTT {
		r.INTT(c0, c0)
		r.INTT(c1, c1)
	}
	N := P.N()
	var out []*rlwe.Ciphertext
	for _, i := range idx {
		if i < 0 || int(i) >= N {
			status.Fail(status.Argument, "coefficient index %d out of [0, %d)", i, N)
		}
		// X^{-i} * (c0, c1) moves coefficient i to the constant term.  [SAFHIRE Sec. 4.3]
		lwe := rlwe.NewCiphertext(P, 1, level)
		*lwe.MetaData = *ct.MetaData
		lwe.IsNTT = false
		for l := 0; l <= level; l++ {
			lwe.Value[0].Coeffs[l][0] = c0.Coeffs[l][i]
		}
		r.MultByMonomial(c1, -int(i), lwe.Value[1])
		out = append(out, lwe)
	}
	return out
}

// LWELincomb returns out[row] = sum_j ws[row*len(cts)+j] * cts[j] for m rows of small
// integer weights.
func LWELincomb(P ckks.Parameters, level int, cts []*rlwe.Ciphertext, ws []int64, m int) []*rlwe.Ciphertext {
	r := P.RingQ().AtLevel(level)
	k := len(cts)
	var res []*rlwe.Ciphertext
	for row := 0; row < m; row++ {
		acc := rlwe.NewCiphertext(P, 1, level)
		if k > 0 {
			*acc.MetaData = *cts[0].MetaData
		}
		acc.IsNTT = false
		for j, ct := range cts {
			wt := ws[row*k+j]
			if wt == 0 {
				continue
			}
			if wt == math.MinInt64 {
				status.Fail(status.Argument, "weight out of range")
			}
			for c := 0; c < 2; c++ {
				if wt > 0 {
					r.MulScalarThenAdd(ct.Value[c], uint64(wt), acc.Value[c])
				} else {
					r.MulScalarThenSub(ct.Value[c], uint64(-wt), acc.Value[c])
				}
			}
		}
		res = append(res, acc)
	}
	return res
}

// LWEExport writes the classic LWE form: bs[t][l] and as[t][l][j] with b + <a, s> = m + e.
func LWEExport(P ckks.Parameters, level int, cts []*rlwe.Ciphertext, bs, as []uint64) {
	N, L := P.N(), level+1
	for t, ct := range cts {
		for l := 0; l < L; l++ {
			q := P.Q()[l]
			bs[t*L+l] = ct.Value[0].Coeffs[l][0]
			c1 := ct.Value[1].Coeffs[l]
			row := as[(t*L+l)*N : (t*L+l+1)*N]
			row[0] = c1[0]
			for j := 1; j < N; j++ {
				row[j] = (q - c1[N-j]) % q
			}
		}
	}
}

// lweMember is an empty batch member at level with scale 2^logScale (coefficient domain).
func lweMember(P ckks.Parameters, level int, logScale float64) *rlwe.Ciphertext {
	ct := rlwe.NewCiphertext(P, 1, level)
	ct.IsNTT = false
	ct.Scale = rlwe.NewScale(math.Exp2(logScale))
	return ct
}

// lweResidue returns v, failing unless it is reduced modulo q = q_l.
func lweResidue(v, q uint64, l int) uint64 {
	if v >= q {
		status.Fail(status.Serial, "LWE value not reduced modulo q_%d", l)
	}
	return v
}

// LWEImport is the inverse of LWEExport (values are checked against the moduli).
func LWEImport(P ckks.Parameters, level, count int, bs, as []uint64, logScale float64) []*rlwe.Ciphertext {
	N, L := P.N(), level+1
	var res []*rlwe.Ciphertext
	for t := 0; t < count; t++ {
		ct := lweMember(P, level, logScale)
		for l := 0; l < L; l++ {
			q := P.Q()[l]
			ct.Value[0].Coeffs[l][0] = lweResidue(bs[t*L+l], q, l)
			row := as[(t*L+l)*N : (t*L+l+1)*N]
			c1 := ct.Value[1].Coeffs[l]
			for j := 0; j < N; j++ {
				lweResidue(row[j], q, l)
			}
			c1[0] = row[0]
			for j := 1; j < N; j++ {
				c1[N-j] = (q - row[j]) % q
			}
		}
		res = append(res, ct)
	}
	return res
}

// LWEDecrypt writes (b + <a, s>) centred / scale for each member into dst (tests only).
func LWEDecrypt(P ckks.Parameters, sk *rlwe.SecretKey, level int, cts []*rlwe.Ciphertext, scale float64, dst []float64) {
	dec := rlwe.NewDecryptor(P, sk)
	r := P.RingQ().AtLevel(level)
	s := new(big.Float).SetFloat64(scale)
	for t, ct := range cts {
		pt := dec.DecryptNew(ct)
		if pt.IsNTT {
			r.INTT(pt.Value, pt.Value)
		}
		dst[t] = quo(centered(r, pt.Value)[0], s)
	}
}

// ---------------------------------------------------------------- caller-visible randomness

// KeyedPRNG is a PRNG keyed with a caller's seed of at least 16 bytes.
func KeyedPRNG(seed []byte, what string) sampling.PRNG {
	if len(seed) < 16 {
		status.Fail(status.Argument, "%s must have at least 16 bytes", what)
	}
	prng, err := sampling.NewKeyedPRNG(seed)
	status.Check(err, status.HE, "prng")
	return prng
}

// SampleCentred fills each dst with the centred coefficients of one draw from the
// distribution d at level 0 (dst has N entries).
func SampleCentred(P ckks.Parameters, prng sampling.PRNG, d ring.DistributionParameters, dst ...[]int64) {
	r0 := P.RingQ().AtLevel(0)
	smp, err := ring.NewSampler(prng, r0, d, false)
	status.Check(err, status.HE, "sampler")
	q0 := P.Q()[0]
	for _, out := range dst {
		p := r0.NewPoly()
		smp.Read(p)
		for j, c := range p.Coeffs[0] {
			if c > q0/2 {
				out[j] = -int64(q0 - c)
			} else {
				out[j] = int64(c)
			}
		}
	}
}

// EncryptRand encrypts pt under pk as c0 = pk0*u + e0 + m, c1 = pk1*u + e1 (mod Q at the
// plaintext's level, no special-prime rounding), so that a prover can later show the
// ciphertext was formed correctly.  [CRISP-certified Sec. 4]  seed != nil: sample u
// (ternary, the key distribution) and e0, e1 (the error distribution) from a PRNG keyed
// with seed and write them into us, e0s, e1s; seed == nil: use them as given (checked
// against the distributions' bounds).
func EncryptRand(P ckks.Parameters, pk *rlwe.PublicKey, pt *rlwe.Plaintext, seed []byte, us, e0s, e1s []int64) *rlwe.Ciphertext {
	if seed != nil {
		prng := KeyedPRNG(seed, "seed")
		SampleCentred(P, prng, P.Xs(), us)
		SampleCentred(P, prng, P.Xe(), e0s, e1s)
	} else {
		ebound := int64(math.Ceil(P.NoiseBound()))
		for j := 0; j < P.N(); j++ {
			if us[j] < -1 || us[j] > 1 {
				status.Fail(status.Argument, "u must be ternary (coefficient %d is %d)", j, us[j])
			}
			if e0s[j] < -ebound || e0s[j] > ebound || e1s[j] < -ebound || e1s[j] > ebound {
				status.Fail(status.Argument, "error coefficient %d exceeds the error bound %d", j, ebound)
			}
		}
	}
	if !pt.IsNTT {
		status.Fail(status.Argument, "plaintext must be in the NTT domain")
	}
	level := pt.Level()
	r := P.RingQ().AtLevel(level)
	uP, e0P, e1P := PolyFromInts(r, us), PolyFromInts(r, e0s), PolyFromInts(r, e1s)
	r.NTT(uP, uP)
	r.NTT(e0P, e0P)
	r.NTT(e1P, e1P)
	ct := rlwe.NewCiphertext(P, 1, level)
	*ct.MetaData = *pt.MetaData
	// pk is stored in NTT and Montgomery form, so MulCoeffsMontgomery yields pk*u in NTT.
	r.MulCoeffsMontgomery(uP, pk.Value[0].Q, ct.Value[0])
	r.MulCoeffsMontgomery(uP, pk.Value[1].Q, ct.Value[1])
	r.Add(ct.Value[0], e0P, ct.Value[0])
	r.Add(ct.Value[0], pt.Value, ct.Value[0])
	r.Add(ct.Value[1], e1P, ct.Value[1])
	return ct
}

// Flood returns ct + Enc_pk(0) + f where f has i.i.d. uniform coefficients in
// [-2^logBound, 2^logBound], drawn from a PRNG keyed with seed (circuit privacy before a
// ciphertext goes back to the key owner).
func Flood(P ckks.Parameters, pk *rlwe.PublicKey, ct *rlwe.Ciphertext, logBound int, seed []byte) *rlwe.Ciphertext {
	if ct.Degree() != 1 {
		status.Fail(status.Argument, "flooding needs a degree-1 ciphertext")
	}
	level := ct.Level()
	if logBound < 0 || logBound > 62 || float64(logBound)+2 > math.Log2(float64(P.Q()[0])) {
		status.Fail(status.Argument, "flooding bound 2^%d too large for q_0", logBound)
	}
	prng := KeyedPRNG(seed, "seed")
	r := P.RingQ().AtLevel(level)
	N := P.N()
	width := uint64(1)<<(uint(logBound)+1) + 1
	buf := make([]byte, 8*N)
	_, err := prng.Read(buf)
	status.Check(err, status.HE, "prng read")
	f := make([]int64, N)
	for j := 0; j < N; j++ {
		var v uint64
		for b := 0; b < 8; b++ {
			v |= uint64(buf[8*j+b]) << (8 * b)
		}
		f[j] = int64(v%width) - int64(width/2)
	}
	fP := PolyFromInts(r, f)
	zero := rlwe.NewCiphertext(P, 1, level)
	*zero.MetaData = *ct.MetaData
	status.Check(rlwe.NewEncryptor(P, pk).EncryptZero(zero), status.HE, "encrypt zero")
	res := ct.CopyNew()
	if res.IsNTT {
		r.NTT(fP, fP)
	}
	r.Add(res.Value[0], zero.Value[0], res.Value[0])
	r.Add(res.Value[1], zero.Value[1], res.Value[1])
	r.Add(res.Value[0], fP, res.Value[0])
	return res
}

// Noise returns log2(std), log2(max |.|) of dec(ct) - pt (pt may be nil: then of dec(ct)).
func Noise(P ckks.Parameters, sk *rlwe.SecretKey, ct *rlwe.Ciphertext, pt *rlwe.Plaintext) (float64, float64) {
	if ct.Degree() != 1 {
		status.Fail(status.Argument, "noise needs a degree-1 ciphertext")
	}
	dec := rlwe.NewDecryptor(P, sk).DecryptNew(ct)
	level := dec.Level()
	r := P.RingQ().AtLevel(level)
	if pt != nil {
		if pt.Level() < level || pt.IsNTT != dec.IsNTT {
			status.Fail(status.Argument, "reference plaintext has a lower level or another domain")
		}
		r.Sub(dec.Value, pt.Value, dec.Value)
	}
	if dec.IsNTT {
		r.INTT(dec.Value, dec.Value)
	}
	std, _, mx := rlwe.NormStats(centered(r, dec.Value))
	return std, mx
}

// Residues writes the coefficient-domain residues (level+1 rows of N) of a copy of p,
// taken out of Montgomery form (mont) and of the NTT domain (ntt), into dst; returns the
// number of rows.
func Residues(P ckks.Parameters, p ring.Poly, ntt, mont bool, dst []uint64) int {
	r := P.RingQ().AtLevel(p.Level())
	p = *p.CopyNew()
	if mont {
		r.IMForm(p, p)
	}
	if ntt {
		r.INTT(p, p)
	}
	L, N := p.Level()+1, P.N()
	if len(dst) < L*N {
		status.Fail(status.Argument, "buffer too small")
	}
	for l := 0; l < L; l++ {
		copy(dst[l*N:(l+1)*N], p.Coeffs[l])
	}
	return L
}
