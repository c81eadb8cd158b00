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

// view is what a player receives during the simulation: its gate outputs in circuit
// order, bit-packed (AND words 32 bits, adders 31, values modulo q ceil(log2 q) bits).
type view struct {
	out bitbuf
}

// run is the state of one repetition (prover: three players; verifier: two).
type run struct {
	verify  bool
	e       int // verifier: the opened players are e and e+1
	andTape [3]*tape
	mulTape [3]*tape
	views   [3]*view
	rd      *bitreader // verifier: player e+1's view from the proof
	primes  []uint64
}

// computes reports whether this run computes player p's gate outputs.
func (r *run) computes(p int) bool { return !r.verify || p == r.e }

// reads reports whether player p's gate outputs come from the proof.
func (r *run) reads(p int) bool { return r.verify && p == (r.e+1)%3 }

// readBits reads player e+1's next gate output of k bits from the proof.
func (r *run) readBits(k int) uint64 { return r.rd.get(k) }

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
			r.views[p].out.put(uint64(z[p]), 32)
		} else if r.reads(p) {
			z[p] = uint32(r.readBits(32))
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
			r.views[p].out.put(uint64(z[p]), 31)
		}
		return bw{x[0] ^ y[0] ^ c[0], x[1] ^ y[1] ^ c[1], x[2] ^ y[2] ^ c[2]}
	}
	e, n := r.e, (r.e+1)%3
	given := uint32(r.readBits(31))
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
	r.views[e].out.put(uint64(ze), 31)
	c[e], c[n] = ce, cn
	return bw{x[0] ^ y[0] ^ c[0], x[1] ^ y[1] ^ c[1], x[2] ^ y[2] ^ c[2]}
}

// ---------------------------------------------------------------- arithmetic scalars

// maxPrimes bounds the RNS primes (Config.Validate): shared scalars are fixed-size values,
// so the conversion block allocates nothing.
const maxPrimes = 8

// av is an element of Z_Q in RNS form, additively shared: av[p][l] is player p's share
// modulo primes[l] (l < len(primes); the rest stay zero).
type av [3][maxPrimes]uint64

func newAV(int) av { return av{} }

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
	xs, ys := [1]av{x}, [1]av{y}
	return r.inner(xs[:], ys[:])
}

// inner is one inner-product gate per RNS prime: sum_k x_k y_k with a single output share
// per player (the cross terms of every product are local to players p and p+1, so the
// products can share one mask R_p - R_{p+1} and one recorded output).
func (r *run) inner(xs, ys []av) av {
	z := newAV(len(r.primes))
	for l, q := range r.primes {
		var rnd [3]uint64
		for p := 0; p < 3; p++ {
			if r.mulTape[p] != nil {
				rnd[p] = r.mulTape[p].modq(q)
			}
		}
		width := bits.Len64(q)
		for p := 0; p < 3; p++ {
			n := (p + 1) % 3
			if r.computes(p) {
				var v uint64
				for k := range xs {
					x, y := xs[k], ys[k]
					v = addmod(v, mulmod(x[p][l], y[p][l], q), q)
					v = addmod(v, mulmod(x[n][l], y[p][l], q), q)
					v = addmod(v, mulmod(x[p][l], y[n][l], q), q)
				}
				v = submod(addmod(v, rnd[p], q), rnd[n], q)
				z[p][l] = v
				r.views[p].out.put(v, width)
			} else if r.reads(p) {
				v := r.readBits(width)
				if v >= q {
					r.rd.short = true // non-canonical residue: a malformed view
				}
				z[p][l] = v % q
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

// bitShares returns the three players' XOR shares of bit i of w lifted to Z_Q, each as an
// additive sharing held by its own player alone.
func (r *run) bitShares(w bw, i uint) [3]av {
	L := len(r.primes)
	s := [3]av{newAV(L), newAV(L), newAV(L)}
	for p := 0; p < 3; p++ {
		bit := uint64((w[p] >> i) & 1)
		for l := range r.primes {
			s[p][p][l] = bit
		}
	}
	return s
}

// b2aWord converts the XOR-shared two's-complement integer in bits shift..shift+nbits-1 of
// w into additive shares modulo every prime [CRISP-certified Sec. 6.1, conversion block]:
// bit k is b_k = s0 ^ s1 ^ s2 (player p holds s_p). With t_k = s0 + s1 - 2 s0 s1 (one
// multiplication gate per bit) and b_k = t_k + s2 - 2 t_k s2,
//
//	d = sum_k c_k b_k = sum_k c_k (t_k + s2_k) - 2 sum_k c_k t_k s2_k
//
// (c_k = 2^k, the sign bit negative) whose last sum is one inner-product gate: nbits + 1
// recorded outputs per prime instead of 2 nbits.
func (r *run) b2aWord(w bw, shift uint, nbits int) av {
	L := len(r.primes)
	acc := newAV(L)
	var xs, ys [32]av
	for k := 0; k < nbits; k++ {
		s := r.bitShares(w, shift+uint(k))
		t := r.lin(1, s[0], 1, s[1])
		t = r.lin(1, t, -2, r.mul(s[0], s[1]))
		c := int64(1) << uint(k)
		if k == nbits-1 {
			c = -c // two's complement sign bit
		}
		acc = r.lin(1, acc, c, r.lin(1, t, 1, s[2]))
		xs[k] = r.lin(c, t, 0, t)
		ys[k] = s[2]
	}
	return r.lin(1, acc, -2, r.inner(xs[:nbits], ys[:nbits]))
}
