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

// AndWordsPerBlock is the number of AND words (adders count as one word of 31 gates) per
// compression: 48 x 3 schedule additions, 64 x (7 additions + Ch + Maj), 8 final additions.
const AndWordsPerBlock = 48*3 + 64*9 + 8

// AndGatesPerBlock is the number of AND gates per compression.
const AndGatesPerBlock = (48*3+64*7+8)*31 + 64*2*32

// compress is one SHA-256 compression on shared words.
func (r *run) compress(state [8]bw, block [16]bw) [8]bw {
	var w [64]bw
	copy(w[:16], block[:])
	for t := 16; t < 64; t++ {
		s0 := xor(xor(rotr(w[t-15], 7), rotr(w[t-15], 18)), shr(w[t-15], 3))
		s1 := xor(xor(rotr(w[t-2], 17), rotr(w[t-2], 19)), shr(w[t-2], 10))
		w[t] = r.add(r.add(r.add(w[t-16], s0), w[t-7]), s1)
	}
	a, b, c, d, e, f, g, h := state[0], state[1], state[2], state[3], state[4], state[5], state[6], state[7]
	for t := 0; t < 64; t++ {
		S1 := xor(xor(rotr(e, 6), rotr(e, 11)), rotr(e, 25))
		ch := xor(r.and(e, xor(f, g)), g)
		t1 := r.add(r.add(r.add(r.add(h, S1), ch), pubWord(shaK[t])), w[t])
		S0 := xor(xor(rotr(a, 2), rotr(a, 13)), rotr(a, 22))
		maj := xor(r.and(xor(a, b), xor(a, c)), a)
		t2 := r.add(S0, maj)
		h, g, f = g, f, e
		e = r.add(d, t1)
		d, c, b = c, b, a
		a = r.add(t1, t2)
	}
	out := [8]bw{a, b, c, d, e, f, g, h}
	for i := range out {
		out[i] = r.add(state[i], out[i])
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
// padding; returns the eight shared digest words.
func (r *run) hashMessage(in []bw, pad []uint32, blocks int) [8]bw {
	var state [8]bw
	for i := range state {
		state[i] = pubWord(shaIV[i])
	}
	for b := 0; b < blocks; b++ {
		var blk [16]bw
		for j := 0; j < 16; j++ {
			t := 16*b + j
			w := pubWord(pad[t])
			if t < len(in) {
				w = xor(w, in[t])
			}
			blk[j] = w
		}
		state = r.compress(state, blk)
	}
	return state
}
