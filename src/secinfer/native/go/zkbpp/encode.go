package zkbpp

import (
	"encoding/json"
	"math"
	"math/bits"

	"github.com/tuneinsight/lattigo/v6/ring"
)

// ---------------------------------------------------------------- CKKS encoding

// encodeTable is the exact CKKS encoding m = E d with E[k, j] = T[g_j k mod 2N],
// T[t] = round(Delta * 2/N * cos(pi t / N)) for t < 2N and g_j = 5^j mod 2N: Lattigo's
// embedding (slot j evaluates at zeta^{g_j}, zeta = exp(i pi/N)) with the rounding moved
// from m to the matrix entries, which makes encoding an exact linear map over Z that the
// circuit evaluates modulo Q.
//
// E is a sum of cyclic correlations, so it is applied in O(N log N) with NTTs instead of
// the N x n dense product. Write a row k != 0 as k = 2^e k' (k' odd) and 2^m = 2N / 2^e.
// The odd residues modulo 2^m are {+-5^a}, 5 has order L = 2^(m-2) = N / 2^(e+1) there,
// and T is even (T[2N - t] = T[t]), so with k' = +-5^a:
//
//	m_k = sum_j d_j T[2^e (5^(a+j) mod 2^m)] = sum_{r < L} D_e[r] U_e[(a + r) mod L]
//
// with U_e[b] = T[2^e (5^b mod 2^m)] and D_e[r] = sum_{j = r mod L} d_j (d folded by the
// period). Row 0 is T[0] sum_j d_j. The correlation of length L is one negacyclic
// product of degree 2L (see correlate), exact modulo every prime of Q (q = 1 mod 2N).
type encodeTable struct {
	n, npts int
	t0      int64 // T[0]
	primes  []uint64
	levels  []encLevel
}

// encLevel is one 2-adic valuation e of the rows.
type encLevel struct {
	L    int
	rows []int // rows k = 2^e k'
	as   []int // their exponents a
	U    []int64
	rq   *ring.Ring // degree 2L (nil: direct correlation for small L)
	uNTT ring.Poly  // NTT of U repeated twice (U[t mod L], t < 2L)
}

// smallCorrelation is the period below which the correlation is computed directly.
const smallCorrelation = 32

func encodeBase(logN, logScale int) []int64 {
	N := 1 << uint(logN)
	amp := math.Ldexp(2, logScale) / float64(N)
	base := make([]int64, N/2+1) // t in [0, N/2]: cos >= 0
	for t := range base {
		base[t] = int64(math.Round(amp * math.Cos(math.Pi*float64(t)/float64(N))))
	}
	T := make([]int64, 2*N)
	for t := 0; t < 2*N; t++ {
		u := t
		if u > N {
			u = 2*N - u // cos(2 pi - x) = cos x
		}
		if u <= N/2 {
			T[t] = base[u]
		} else {
			T[t] = -base[N-u] // cos(pi - x) = -cos x
		}
	}
	return T
}

// subRingLiteral mirrors the JSON form of a Lattigo SubRing (ring.Ring's MarshalJSON):
// degree, modulus, the factors of q - 1 and a primitive root. A prime's factors and
// primitive root do not depend on the degree, so the smaller rings are built from the
// degree-N ring's without factoring q - 1 again (NewRing would, once per ring and prime).
type subRingLiteral struct {
	Type          uint8
	LogN          uint8
	NthRoot       uint8
	Modulus       uint64
	Factors       []uint64
	PrimitiveRoot uint64
}

// ringOfDegree returns the standard ring of degree n over base's primes.
func ringOfDegree(base *ring.Ring, n int) (*ring.Ring, error) {
	if n == base.N() {
		return base, nil
	}
	lits := make([]subRingLiteral, len(base.SubRings))
	for i, s := range base.SubRings {
		lits[i] = subRingLiteral{Type: uint8(ring.Standard), LogN: uint8(bits.Len(uint(n)) - 1), NthRoot: 2,
			Modulus: s.Modulus, Factors: s.Factors, PrimitiveRoot: s.PrimitiveRoot}
	}
	data, err := json.Marshal(lits)
	if err != nil {
		return nil, err
	}
	r := new(ring.Ring)
	if err := r.UnmarshalJSON(data); err != nil {
		return nil, err
	}
	return r, nil
}

// newEncodeTable builds the encoding for npts data points; base is the degree-N ring over
// the primes (nil: built here).
func newEncodeTable(logN, logScale, npts int, primes []uint64, base *ring.Ring) (*encodeTable, error) {
	N := 1 << uint(logN)
	T := encodeBase(logN, logScale)
	if base == nil {
		var err error
		if base, err = ring.NewRing(N, primes); err != nil {
			return nil, err
		}
	}
	tab := &encodeTable{n: N, npts: npts, t0: T[0], primes: primes}
	for e := 0; e < logN; e++ {
		m := uint(logN + 1 - e)
		mod := 1 << m
		L := N >> uint(e+1)
		lv := encLevel{L: L, U: make([]int64, L)}
		idx := make([]int, mod)
		x := 1
		for b := 0; b < L; b++ {
			lv.U[b] = T[(x<<uint(e))%(2*N)]
			idx[x], idx[mod-x] = b, b
			x = x * 5 % mod
		}
		for k1 := 1; k1<<uint(e) < N; k1 += 2 {
			lv.rows = append(lv.rows, k1<<uint(e))
			lv.as = append(lv.as, idx[k1])
		}
		if L >= smallCorrelation {
			rq, err := ringOfDegree(base, 2*L)
			if err != nil {
				return nil, err
			}
			lv.rq = rq
			lv.uNTT = rq.NewPoly()
			for l, q := range primes {
				for t := 0; t < 2*L; t++ {
					lv.uNTT.Coeffs[l][t] = signedMod(lv.U[t%L], q)
				}
			}
			rq.NTT(lv.uNTT, lv.uNTT)
		}
		tab.levels = append(tab.levels, lv)
	}
	return tab, nil
}

// encode writes m = E d modulo every prime: d[l] holds the npts data points (or their
// shares) modulo primes[l], out[l] the N coefficients.
func (t *encodeTable) encode(d [][]uint64, out [][]uint64) {
	for l, q := range t.primes {
		var s uint64
		for _, v := range d[l] {
			s = addmod(s, v, q)
		}
		out[l][0] = mulmod(signedMod(t.t0, q), s, q)
	}
	for i := range t.levels {
		t.levels[i].correlate(t.primes, d, out)
	}
}

// correlate writes the rows of level lv: C[a] = sum_r D[r] U[(a + r) mod L]. With
// Drev[s] = D[L-1-s] and Uext[t] = U[t mod L] (t < 2L), C[a] is coefficient a + L - 1 of
// the linear convolution Drev * Uext, whose degree is at most 3L - 2. Modulo X^2L + 1
// coefficient i < 2L is lin[i] - lin[i + 2L], and for i >= L - 1 the second term has
// degree >= 3L - 1, i.e. is zero: the negacyclic product gives C exactly.
func (lv *encLevel) correlate(primes []uint64, d [][]uint64, out [][]uint64) {
	L := lv.L
	if lv.rq == nil {
		for l, q := range primes {
			D := make([]uint64, L)
			for j, v := range d[l] {
				D[j%L] = addmod(D[j%L], v, q)
			}
			for i, k := range lv.rows {
				a := lv.as[i]
				var hi, lo uint64
				var acc uint64
				for r := 0; r < L; r++ {
					hi, lo = bits.Mul64(signedMod(lv.U[(a+r)%L], q), D[r])
					acc = addmod(acc, bits.Rem64(hi%q, lo, q), q)
				}
				out[l][k] = acc
			}
		}
		return
	}
	rq := lv.rq
	p := rq.NewPoly()
	for l, q := range primes {
		row := p.Coeffs[l]
		for j, v := range d[l] {
			s := L - 1 - j%L
			row[s] = addmod(row[s], v, q)
		}
	}
	rq.NTT(p, p)
	rq.MulCoeffsBarrett(p, lv.uNTT, p)
	rq.INTT(p, p)
	for l := range primes {
		row := p.Coeffs[l]
		for i, k := range lv.rows {
			out[l][k] = row[lv.as[i]+L-1]
		}
	}
}

// Encode returns the residues of m = E d modulo each prime (the plaintext the user
// encrypts), d the signed integer data points.
func Encode(cfg *Config, d []int64) ([][]uint64, error) {
	tab, err := newEncodeTable(cfg.LogN, cfg.LogScale, len(d), cfg.Primes, nil)
	if err != nil {
		return nil, err
	}
	dq := make([][]uint64, len(cfg.Primes))
	out := make([][]uint64, len(cfg.Primes))
	for l, q := range cfg.Primes {
		dq[l] = make([]uint64, len(d))
		for j, v := range d {
			dq[l][j] = signedMod(v, q)
		}
		out[l] = make([]uint64, cfg.N())
	}
	tab.encode(dq, out)
	return out, nil
}
