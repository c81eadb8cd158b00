package zkbpp

import (
	"fmt"
	"math"

	"github.com/tuneinsight/lattigo/v6/ring"
)

// The certified-data circuit [CRISP-certified Sec. 6.1, "Implementation Details"]:
//
//	inputs (secret)  messages msg_i (data point || additional information), the
//	                 encryption randomness u, e0, e1 and the BDOP randomness r_0..r_4
//	Boolean part     digest_i = SHA-256(msg_i); the data point's bits -> Z_Q (b2a)
//	arithmetic part  m = E d (CKKS encoding, exact integer matrix, see Encode);
//	                 ct = (pk0 u + e0 + m, pk1 u + e1);
//	                 BDOP, n = 1, k = 5, l = 3: C1 = r0 + a1 r1 + a2 r2 + a3 r3 + a4 r4,
//	                 C2_j = r_j + b_j r4 + x_j with x = (u, e0, e1)
//	outputs (public) the digests (signed by the data source), ct, C1, C2.

// Number of secret polynomials (u, e0, e1, r0..r4), public polynomials (pk0, pk1,
// a1..a4, b1..b3) and output polynomials (ct0, ct1, C1, C2_1..3).
const (
	NumSecretPolys = 8
	NumPublicPolys = 9
	NumOutputPolys = 6
)

// Config fixes the circuit's shape.
type Config struct {
	LogN     int
	Primes   []uint64 // the ciphertext modulus Q in RNS (the level's primes)
	Reps     int      // ZKB++ repetitions
	MsgBytes int      // bytes per message
	DataBits int      // each data point: DataBits/8 bytes, big-endian, signed
	NMsgs    int      // messages
	Points   int      // data points per message, its first Points * DataBits/8 bytes
	LogScale int      // CKKS scale 2^LogScale
}

func (c *Config) N() int { return 1 << uint(c.LogN) }

// NPoints is the number of data points (one per slot, at most N/2): message i carries
// points i*Points .. (i+1)*Points - 1.
func (c *Config) NPoints() int { return c.NMsgs * c.Points }

func (c *Config) Validate() error {
	switch {
	case c.LogN < 3 || c.LogN > 16:
		return fmt.Errorf("logN %d out of range", c.LogN)
	case len(c.Primes) < 1 || len(c.Primes) > maxPrimes:
		return fmt.Errorf("need 1..%d primes, got %d", maxPrimes, len(c.Primes))
	case c.Reps < 1 || c.Reps > 1000:
		return fmt.Errorf("repetitions %d out of range", c.Reps)
	case c.DataBits != 8 && c.DataBits != 16 && c.DataBits != 32:
		return fmt.Errorf("data points must have 8, 16 or 32 bits, not %d", c.DataBits)
	case c.Points < 1 || c.Points > 1<<16:
		return fmt.Errorf("%d data points per message out of range", c.Points)
	case c.MsgBytes < c.Points*c.DataBits/8 || c.MsgBytes > 1<<16:
		return fmt.Errorf("message size %d out of range", c.MsgBytes)
	case c.NMsgs < 1 || c.NPoints() > c.N()/2:
		return fmt.Errorf("%d messages of %d points do not fit %d slots", c.NMsgs, c.Points, c.N()/2)
	case c.LogScale < 1 || c.LogScale+1 >= 64:
		return fmt.Errorf("log scale %d out of range", c.LogScale)
	}
	for _, q := range c.Primes {
		if q < 3 || q>>62 != 0 || (q-1)%uint64(2*c.N()) != 0 {
			return fmt.Errorf("prime %d is not an NTT prime below 2^62 for N = %d", q, c.N())
		}
	}
	if lim := 2.0 * math.Ldexp(1, c.LogScale) / float64(c.N()); lim >= math.Ldexp(1, 52) {
		return fmt.Errorf("scale 2^%d too large for exact encoding tables", c.LogScale)
	}
	return nil
}

// ---------------------------------------------------------------- the circuit

// publicData is the statement's public input, prepared once (NTT forms).
type publicData struct {
	cfg     *Config
	rq      *ring.Ring
	polys   [NumPublicPolys]ring.Poly // NTT domain
	pad     []uint32
	blocks  int
	nw      int
	mask    []uint32
	encTab  *encodeTable
	digests [][8]uint32
	target  [][8]uint32               // the Boolean outputs' public value: digest - outputOffset
	outA    [NumOutputPolys]ring.Poly // the outputs' domains (outputNTT)
}

func newPublic(cfg *Config, pub [NumPublicPolys][][]uint64, digests [][8]uint32, out [NumOutputPolys][][]uint64) (*publicData, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rq, err := ring.NewRing(cfg.N(), cfg.Primes)
	if err != nil {
		return nil, err
	}
	pd := &publicData{cfg: cfg, rq: rq, digests: digests}
	for i := range pub {
		pd.polys[i] = polyFrom(rq, pub[i])
		rq.NTT(pd.polys[i], pd.polys[i])
	}
	for i := range out {
		pd.outA[i] = polyFrom(rq, out[i])
		if outputNTT(i) {
			rq.NTT(pd.outA[i], pd.outA[i]) // the domain the players' output shares live in
		}
	}
	pd.pad, pd.blocks = paddedWords(cfg.MsgBytes)
	pd.mask = msgMask(cfg.MsgBytes)
	pd.nw = len(pd.mask)
	off := outputOffset(pd.blocks)
	pd.target = make([][8]uint32, len(digests))
	for i, dg := range digests {
		for k := range dg {
			pd.target[i][k] = dg[k] - off[k]
		}
	}
	if pd.encTab, err = newEncodeTable(cfg.LogN, cfg.LogScale, cfg.NPoints(), cfg.Primes, rq); err != nil {
		return nil, err
	}
	return pd, nil
}

func polyFrom(rq *ring.Ring, rows [][]uint64) ring.Poly {
	p := rq.NewPoly()
	for l := range p.Coeffs {
		q := rq.SubRings[l].Modulus
		for j, v := range rows[l] {
			p.Coeffs[l][j] = v % q
		}
	}
	return p
}

// inputs are one player's input shares.
type inputs struct {
	words []uint32                  // NMsgs * nw message words (message bits only)
	polys [NumSecretPolys]ring.Poly // NTT domain (see witnessNTT)
}

// outputNTT reports whether output polynomial k is shared (and hashed) in the NTT domain:
// all but c0, which adds the coefficient-domain encoding m.
func outputNTT(k int) bool { return k != 0 }

// outputs are one player's output shares.
type outputs struct {
	words []uint32 // 8 digest words per message
	polys [NumOutputPolys]ring.Poly
}

// evaluate runs the circuit on the players' input shares; players that this run does not
// know (the verifier's e+2) carry zeros and their outputs are meaningless.
func (r *run) evaluate(pd *publicData, rq *ring.Ring, in [3]*inputs, live [3]bool) [3]*outputs {
	cfg := pd.cfg
	var out [3]*outputs
	for p := 0; p < 3; p++ {
		out[p] = &outputs{words: make([]uint32, 8*cfg.NMsgs)}
	}
	L := len(cfg.Primes)
	d := [3][][]uint64{} // d[p][l][j]
	for p := 0; p < 3; p++ {
		d[p] = make([][]uint64, L)
		for l := range d[p] {
			d[p][l] = make([]uint64, cfg.NPoints())
		}
	}
	nb := cfg.DataBits / 8
	msgWords := make([]bw, pd.nw)
	for i := 0; i < cfg.NMsgs; i++ {
		for t := 0; t < pd.nw; t++ {
			for p := 0; p < 3; p++ {
				msgWords[t][p] = in[p].words[i*pd.nw+t]
			}
		}
		dig := r.hashMessage(msgWords, pd.pad, pd.blocks)
		for k := 0; k < 8; k++ {
			for p := 0; p < 3; p++ {
				out[p].words[8*i+k] = dig[k][p]
			}
		}
		// [CRISP-certified Sec. 6.1] the data points' bits, Boolean -> arithmetic: point j
		// sits at byte j*nb of the message (big-endian words; 8/16/32-bit points never
		// straddle a word)
		for j := 0; j < cfg.Points; j++ {
			off := j * nb
			shift := uint(32 - cfg.DataBits - 8*(off%4))
			acc := r.b2aWord(msgWords[off/4], shift, cfg.DataBits)
			for p := 0; p < 3; p++ {
				for l := 0; l < L; l++ {
					d[p][l][i*cfg.Points+j] = acc[p][l]
				}
			}
		}
	}
	for p := 0; p < 3; p++ {
		if !live[p] {
			for k := range out[p].polys {
				out[p].polys[k] = rq.NewPoly()
			}
			continue
		}
		x := in[p].polys // NTT domain: u, e0, e1, r0..r4
		m := rq.NewPoly()
		pd.encTab.encode(d[p], m.Coeffs)
		o := &out[p].polys
		for k := range o {
			o[k] = rq.NewPoly()
		}
		P := pd.polys
		mulAcc := func(dst ring.Poly, pairs ...ring.Poly) {
			for i := 0; i < len(pairs); i += 2 {
				rq.MulCoeffsBarrettThenAdd(pairs[i], pairs[i+1], dst)
			}
		}
		mulAcc(o[0], P[0], x[0])
		rq.Add(o[0], x[1], o[0]) // + e0
		rq.INTT(o[0], o[0])
		rq.Add(o[0], m, o[0]) // + m (coefficient domain)
		mulAcc(o[1], P[1], x[0])
		rq.Add(o[1], x[2], o[1]) // + e1
		mulAcc(o[2], P[2], x[4], P[3], x[5], P[4], x[6], P[5], x[7])
		rq.Add(o[2], x[3], o[2]) // + r0
		for j := 0; j < 3; j++ {
			mulAcc(o[3+j], P[6+j], x[7])
			rq.Add(o[3+j], x[4+j], o[3+j]) // + r_j
			rq.Add(o[3+j], x[j], o[3+j])   // + x_j
		}
	}
	return out
}

// LinComb returns sum_i a_i * x_i in R_Q (negacyclic, RNS rows): a_i residues, x_i small
// signed integers. The BDOP commitment and its bound proof (secinfer.crypto.zk.bdop) are
// such combinations.
func LinComb(logN int, primes []uint64, a [][][]uint64, x [][]int64) ([][]uint64, error) {
	N := 1 << uint(logN)
	rq, err := ring.NewRing(N, primes)
	if err != nil {
		return nil, err
	}
	acc := rq.NewPoly()
	for i := range a {
		A := polyFrom(rq, a[i])
		X := rq.NewPoly()
		for l, q := range primes {
			for j, v := range x[i] {
				X.Coeffs[l][j] = signedMod(v, q)
			}
		}
		rq.NTT(A, A)
		rq.NTT(X, X)
		rq.MulCoeffsBarrettThenAdd(A, X, acc)
	}
	rq.INTT(acc, acc)
	return acc.Coeffs, nil
}
