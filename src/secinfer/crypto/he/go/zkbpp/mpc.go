package zkbpp

import "math/bits"

// A (2,3)-decomposition [ZKB++ Sec. 3]: every wire is shared among three players, linear
// gates are local, and a multiplication (AND) gate has player p compute its output share
// from its own and its successor's input shares and random tapes:
//
//	z_p = x_p y_p + x_{p+1} y_p + x_p y_{p+1} + R_p(c) - R_{p+1}(c)
//
// The prover simulates all three players; the verifier, given the opened players e and
// e+1, recomputes player e and reads player e+1's gate outputs from the proof.

// view is what a player receives during the simulation: its multiplication outputs.
type view struct {
	and []uint32 // Boolean AND outputs, one 32-bit word per word gate or adder
	mul []uint64 // arithmetic multiplication outputs, one per gate and RNS prime
}

// run is the state of one repetition (prover: three players; verifier: two).
type run struct {
	verify       bool
	e            int // verifier: the opened players are e and e+1
	andTape      [3]*tape
	mulTape      [3]*tape
	views        [3]*view
	rdAnd, rdMul int // verifier: read positions in views[e+1]
	short        bool
	primes       []uint64
}

// computes reports whether this run computes player p's gate outputs.
func (r *run) computes(p int) bool { return !r.verify || p == r.e }

// reads reports whether player p's gate outputs come from the proof.
func (r *run) reads(p int) bool { return r.verify && p == (r.e+1)%3 }

func (r *run) readAnd() uint32 {
	v := r.views[(r.e+1)%3]
	if r.rdAnd >= len(v.and) {
		r.short = true
		return 0
	}
	r.rdAnd++
	return v.and[r.rdAnd-1]
}

func (r *run) readMul() uint64 {
	v := r.views[(r.e+1)%3]
	if r.rdMul >= len(v.mul) {
		r.short = true
		return 0
	}
	r.rdMul++
	return v.mul[r.rdMul-1]
}

// ---------------------------------------------------------------- Boolean words

// bw is a 32-bit word XOR-shared among the three players.
type bw [3]uint32

func pubWord(c uint32) bw { return bw{c, 0, 0} }

func xor(a, b bw) bw { return bw{a[0] ^ b[0], a[1] ^ b[1], a[2] ^ b[2]} }

func rotr(a bw, n uint) bw {
	return bw{bits.RotateLeft32(a[0], -int(n)), bits.RotateLeft32(a[1], -int(n)), bits.RotateLeft32(a[2], -int(n))}
}

func shr(a bw, n uint) bw { return bw{a[0] >> n, a[1] >> n, a[2] >> n} }

// and is a word of 32 AND gates.
func (r *run) and(x, y bw) bw {
	var rnd [3]uint32
	for p := 0; p < 3; p++ {
		if r.andTape[p] != nil {
			rnd[p] = r.andTape[p].u32()
		}
	}
	var z bw
	for p := 0; p < 3; p++ {
		q := (p + 1) % 3
		if r.computes(p) {
			z[p] = (x[p] & y[p]) ^ (x[q] & y[p]) ^ (x[p] & y[q]) ^ rnd[p] ^ rnd[q]
			r.views[p].and = append(r.views[p].and, z[p])
		} else if r.reads(p) {
			z[p] = r.readAnd()
		}
	}
	return z
}

// add is addition mod 2^32 by a ripple-carry adder: c_{i+1} = ((x_i^c_i) & (y_i^c_i)) ^ c_i,
// 31 AND gates whose outputs are kept as one word per adder [ZKB++ SHA-256 circuit].
func (r *run) add(x, y bw) bw {
	var rnd [3]uint32
	for p := 0; p < 3; p++ {
		if r.andTape[p] != nil {
			rnd[p] = r.andTape[p].u32()
		}
	}
	var c, z bw
	if !r.verify {
		// All three players, word-wide: bit i of each gate word is exact once the carries
		// below bit i are, so only bit i is kept per step.
		r01, r12, r20 := rnd[0]^rnd[1], rnd[1]^rnd[2], rnd[2]^rnd[0]
		for i := uint(0); i < 31; i++ {
			a0, a1, a2 := x[0]^c[0], x[1]^c[1], x[2]^c[2]
			b0, b1, b2 := y[0]^c[0], y[1]^c[1], y[2]^c[2]
			m := uint32(1) << i
			g0 := ((a0 & b0) ^ (a1 & b0) ^ (a0 & b1) ^ r01) & m
			g1 := ((a1 & b1) ^ (a2 & b1) ^ (a1 & b2) ^ r12) & m
			g2 := ((a2 & b2) ^ (a0 & b2) ^ (a2 & b0) ^ r20) & m
			z[0], z[1], z[2] = z[0]|g0, z[1]|g1, z[2]|g2
			c[0] |= (g0 ^ (c[0] & m)) << 1
			c[1] |= (g1 ^ (c[1] & m)) << 1
			c[2] |= (g2 ^ (c[2] & m)) << 1
		}
		for p := 0; p < 3; p++ {
			r.views[p].and = append(r.views[p].and, z[p])
		}
		return bw{x[0] ^ y[0] ^ c[0], x[1] ^ y[1] ^ c[1], x[2] ^ y[2] ^ c[2]}
	}
	e, n := r.e, (r.e+1)%3
	given := r.readAnd()
	rr := rnd[e] ^ rnd[n]
	var ce, cn, ze uint32
	for i := uint(0); i < 31; i++ {
		ae, an := x[e]^ce, x[n]^cn
		be, bn := y[e]^ce, y[n]^cn
		m := uint32(1) << i
		g := ((ae & be) ^ (an & be) ^ (ae & bn) ^ rr) & m
		ze |= g
		ce |= (g ^ (ce & m)) << 1
		cn |= ((given & m) ^ (cn & m)) << 1
	}
	r.views[e].and = append(r.views[e].and, ze)
	c[e], c[n] = ce, cn
	return bw{x[0] ^ y[0] ^ c[0], x[1] ^ y[1] ^ c[1], x[2] ^ y[2] ^ c[2]}
}

// ---------------------------------------------------------------- arithmetic scalars

// av is an element of Z_Q in RNS form, additively shared: av[p][l] is player p's share
// modulo primes[l].
type av [3][]uint64

func newAV(L int) av { return av{make([]uint64, L), make([]uint64, L), make([]uint64, L)} }

func mulmod(a, b, q uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return bits.Rem64(hi, lo, q)
}

func addmod(a, b, q uint64) uint64 {
	s := a + b
	if s >= q || s < a {
		s -= q
	}
	return s
}

func submod(a, b, q uint64) uint64 {
	if a >= b {
		return a - b
	}
	return a + (q - b)
}

// mul is one multiplication gate per RNS prime.
func (r *run) mul(x, y av) av {
	z := newAV(len(r.primes))
	for l, q := range r.primes {
		var rnd [3]uint64
		for p := 0; p < 3; p++ {
			if r.mulTape[p] != nil {
				rnd[p] = r.mulTape[p].modq(q)
			}
		}
		for p := 0; p < 3; p++ {
			n := (p + 1) % 3
			if r.computes(p) {
				v := mulmod(x[p][l], y[p][l], q)
				v = addmod(v, mulmod(x[n][l], y[p][l], q), q)
				v = addmod(v, mulmod(x[p][l], y[n][l], q), q)
				v = submod(addmod(v, rnd[p], q), rnd[n], q)
				z[p][l] = v
				r.views[p].mul = append(r.views[p].mul, v)
			} else if r.reads(p) {
				z[p][l] = r.readMul() % q
			}
		}
	}
	return z
}

// lin returns a*x + b*y (public integer coefficients, possibly negative).
func (r *run) lin(a int64, x av, b int64, y av) av {
	z := newAV(len(r.primes))
	for l, q := range r.primes {
		ca, cb := signedMod(a, q), signedMod(b, q)
		for p := 0; p < 3; p++ {
			z[p][l] = addmod(mulmod(ca, x[p][l], q), mulmod(cb, y[p][l], q), q)
		}
	}
	return z
}

func signedMod(v int64, q uint64) uint64 {
	if v >= 0 {
		return uint64(v) % q
	}
	m := uint64(-v) % q
	if m == 0 {
		return 0
	}
	return q - m
}

// b2a converts a XOR-shared bit (bit i of w) into additive shares modulo every prime:
// b = s0 ^ s1 ^ s2 with player p holding s_p, computed as t = s0 + s1 - 2 s0 s1 and
// b = t + s2 - 2 t s2 (two multiplication gates per prime).
func (r *run) b2a(w bw, i uint) av {
	L := len(r.primes)
	s := [3]av{newAV(L), newAV(L), newAV(L)}
	for p := 0; p < 3; p++ {
		bit := uint64((w[p] >> i) & 1)
		for l := range r.primes {
			s[p][p][l] = bit
		}
	}
	t := r.lin(1, s[0], 1, s[1])
	t = r.lin(1, t, -2, r.mul(s[0], s[1]))
	b := r.lin(1, t, 1, s[2])
	return r.lin(1, b, -2, r.mul(t, s[2]))
}
