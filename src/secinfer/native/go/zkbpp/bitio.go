package zkbpp

import "encoding/binary"

// Bit-packed encodings of the proof's views and input shares: every gate output takes
// exactly its width (31 bits per adder, 32 per AND word, ceil(log2 q) per value modulo q),
// so nothing the verifier cannot recompute is sent in padding [ZKB++ Sec. 4, proof size].

// bitbuf is an append-only bit string, least significant bit first.
type bitbuf struct {
	w []uint64
	n int // bits written
}

// put appends the low k bits of v (k <= 64).
func (b *bitbuf) put(v uint64, k int) {
	if k < 64 {
		v &= 1<<uint(k) - 1
	}
	off := b.n & 63
	if off == 0 {
		b.w = append(b.w, v)
	} else {
		b.w[len(b.w)-1] |= v << uint(off)
		if off+k > 64 {
			b.w = append(b.w, v>>uint(64-off))
		}
	}
	b.n += k
}

// bytes returns the bit string as ceil(n/8) bytes (little-endian, zero padding).
func (b *bitbuf) bytes() []byte {
	out := make([]byte, (b.n+7)/8)
	full := len(out) / 8
	for i := 0; i < full; i++ {
		binary.LittleEndian.PutUint64(out[8*i:], b.w[i])
	}
	for i := 8 * full; i < len(out); i++ {
		out[i] = byte(b.w[i/8] >> uint(8*(i%8)))
	}
	return out
}

// withCapacity returns an empty bitbuf with room for words 64-bit words (a size hint:
// every repetition records the same number of bits).
func withCapacity(words int) bitbuf { return bitbuf{w: make([]uint64, 0, words)} }

// bitreader reads a bit string written by bitbuf; reading past its end marks it short.
type bitreader struct {
	b     []byte
	pos   int // bits read
	short bool
}

func (r *bitreader) get(k int) uint64 {
	if r.pos+k > 8*len(r.b) {
		r.short = true
		r.pos += k
		return 0
	}
	var v uint64
	for i := 0; i < k; {
		byteIdx, bit := (r.pos+i)/8, (r.pos+i)%8
		take := 8 - bit
		if take > k-i {
			take = k - i
		}
		chunk := uint64(r.b[byteIdx]>>uint(bit)) & (1<<uint(take) - 1)
		v |= chunk << uint(i)
		i += take
	}
	r.pos += k
	return v
}

// exhausted reports whether every byte was read and the padding bits are zero (a
// canonical encoding: one bit string, one proof).
func (r *bitreader) exhausted() bool {
	if r.short || (r.pos+7)/8 != len(r.b) {
		return false
	}
	if rem := r.pos % 8; rem != 0 && r.b[len(r.b)-1]>>uint(rem) != 0 {
		return false
	}
	return true
}
