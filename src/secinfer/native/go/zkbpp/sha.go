package zkbpp

// SHA-256 as a Boolean circuit over XOR-shared 32-bit words [FIPS 180-4 Sec. 6.2], written
// with the gate counts of the ZKB++ SHA-256 circuit: Ch(e,f,g) = (e & (f^g)) ^ g and
// Maj(a,b,c) = ((a^b) & (a^c)) ^ a take one AND word each; every addition mod 2^32 is a
// 31-gate ripple-carry adder.

var shaK = [64]uint32{
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
	0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
	0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
	0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
	0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
}

var shaIV = [8]uint32{
	0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
}

// sv is a shared word that may be public (known to the verifier from the statement:
// the IV, the padding, round constants and whatever is computed from them alone). Public
// words live in player 0's share; operations on public words cost no gates, and an AND
// with a public operand is local [ZKB++ Sec. 4: only non-linear gates on secret wires
// enter the views].
type sv struct {
	w   bw
	pub bool
}

func pubV(c uint32) sv            { return sv{pubWord(c), true} }
func secV(w bw) sv                { return sv{w, false} }
func xorV(a, b sv) sv             { return sv{xor(a.w, b.w), a.pub && b.pub} }
func rotrV(a sv, n uint) sv       { return sv{rotr(a.w, n), a.pub} }
func shrV(a sv, n uint) sv        { return sv{shr(a.w, n), a.pub} }
func (a sv) value() uint32        { return a.w[0] }
func notPubAnd(a sv, c uint32) sv { return sv{bw{a.w[0] & c, a.w[1] & c, a.w[2] & c}, a.pub} }

// andV is x & y: one AND word when both are secret, local otherwise.
func (r *run) andV(x, y sv) sv {
	switch {
	case x.pub:
		return notPubAnd(y, x.value())
	case y.pub:
		return notPubAnd(x, y.value())
	}
	return secV(r.and(x.w, y.w))
}

// sumV adds words mod 2^32: the public ones are summed in the clear, then one 31-gate
// adder per remaining secret operand (and one for a non-zero public sum).
func (r *run) sumV(ops ...sv) sv {
	var c uint32
	var secret []sv
	for _, o := range ops {
		if o.pub {
			c += o.value()
		} else {
			secret = append(secret, o)
		}
	}
	if len(secret) == 0 {
		return pubV(c)
	}
	acc := secret[0].w
	for _, o := range secret[1:] {
		acc = r.add(acc, o.w)
	}
	if c != 0 {
		acc = r.add(acc, pubWord(c))
	}
	return secV(acc)
}

// chV is Ch(e,f,g) = (e & (f^g)) ^ g.
func (r *run) chV(e, f, g sv) sv { return xorV(r.andV(e, xorV(f, g)), g) }

// majV is Maj(a,b,c) = (x & (y^z)) ^ (y & z) for the ordering of (a,b,c) that puts public
// words in y, z: zero AND words when two inputs are public, else one.
func (r *run) majV(a, b, c sv) sv {
	x, y, z := a, b, c
	switch {
	case a.pub && b.pub:
		x, y, z = c, a, b
	case a.pub && c.pub:
		x, y, z = b, a, c
	case !(b.pub && c.pub):
		// generic: ((a^b) & (a^c)) ^ a, one AND word
		return xorV(r.andV(xorV(a, b), xorV(a, c)), a)
	}
	return xorV(r.andV(x, xorV(y, z)), r.andV(y, z))
}

// compress is one SHA-256 compression on shared words. With finalAdd false the state
// before the feed-forward addition is returned (the caller adds the public chaining
// value outside the circuit).
func (r *run) compress(state [8]sv, block [16]sv, finalAdd bool) [8]sv {
	var w [64]sv
	copy(w[:16], block[:])
	for t := 16; t < 64; t++ {
		s0 := xorV(xorV(rotrV(w[t-15], 7), rotrV(w[t-15], 18)), shrV(w[t-15], 3))
		s1 := xorV(xorV(rotrV(w[t-2], 17), rotrV(w[t-2], 19)), shrV(w[t-2], 10))
		w[t] = r.sumV(w[t-16], s0, w[t-7], s1)
	}
	a, b, c, d, e, f, g, h := state[0], state[1], state[2], state[3], state[4], state[5], state[6], state[7]
	for t := 0; t < 64; t++ {
		S1 := xorV(xorV(rotrV(e, 6), rotrV(e, 11)), rotrV(e, 25))
		t1 := r.sumV(h, S1, r.chV(e, f, g), pubV(shaK[t]), w[t])
		S0 := xorV(xorV(rotrV(a, 2), rotrV(a, 13)), rotrV(a, 22))
		t2 := r.sumV(S0, r.majV(a, b, c))
		h, g, f = g, f, e
		e = r.sumV(d, t1)
		d, c, b = c, b, a
		a = r.sumV(t1, t2)
	}
	out := [8]sv{a, b, c, d, e, f, g, h}
	if finalAdd {
		for i := range out {
			out[i] = r.sumV(state[i], out[i])
		}
	}
	return out
}

// paddedWords returns the public padding of a msgBytes-long message as big-endian words
// (zero where message bytes go) and the number of 64-byte blocks [FIPS 180-4 Sec. 5.1.1].
func paddedWords(msgBytes int) ([]uint32, int) {
	blocks := (msgBytes + 9 + 63) / 64
	buf := make([]byte, blocks*64)
	buf[msgBytes] = 0x80
	bitsLen := uint64(msgBytes) * 8
	for i := 0; i < 8; i++ {
		buf[len(buf)-1-i] = byte(bitsLen >> (8 * i))
	}
	words := make([]uint32, blocks*16)
	for i := range words {
		words[i] = uint32(buf[4*i])<<24 | uint32(buf[4*i+1])<<16 | uint32(buf[4*i+2])<<8 | uint32(buf[4*i+3])
	}
	return words, blocks
}

// msgMask is the mask of message bits in each of the first ceil(msgBytes/4) words.
func msgMask(msgBytes int) []uint32 {
	nw := (msgBytes + 3) / 4
	m := make([]uint32, nw)
	for i := range m {
		m[i] = 0xffffffff
	}
	if rem := msgBytes % 4; rem != 0 {
		m[nw-1] = 0xffffffff << (8 * uint(4-rem))
	}
	return m
}

// hashMessage hashes one shared message (its words, message bits only) with the public
// padding. It returns the eight shared output words: the digest, except for one-block
// messages whose feed-forward addition of the public IV is left to the verifier's side
// (their outputs are compared with digest - IV, see outputOffset).
func (r *run) hashMessage(in []bw, pad []uint32, blocks int) [8]bw {
	var state [8]sv
	for i := range state {
		state[i] = pubV(shaIV[i])
	}
	for b := 0; b < blocks; b++ {
		var blk [16]sv
		for j := 0; j < 16; j++ {
			t := 16*b + j
			blk[j] = pubV(pad[t])
			if t < len(in) {
				blk[j] = secV(xor(blk[j].w, in[t]))
			}
		}
		state = r.compress(state, blk, blocks > 1)
	}
	var out [8]bw
	for i := range out {
		out[i] = state[i].w
	}
	return out
}

// outputOffset is the public word added to the circuit's Boolean outputs to give the
// digest: the IV for one-block messages (see hashMessage), else zero.
func outputOffset(blocks int) [8]uint32 {
	if blocks == 1 {
		return shaIV
	}
	return [8]uint32{}
}
