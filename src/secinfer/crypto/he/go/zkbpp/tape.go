// Package zkbpp is a ZKB++ prover and verifier (Chase et al., CCS 2017: MPC-in-the-head
// over a (2,3)-decomposition, made non-interactive with Fiat-Shamir) for the circuit of
// CRISP's certified-data transformation [CRISP-certified Sec. 6.1]: a Boolean part
// (SHA-256 over the signed messages, bits of the data points converted to arithmetic
// shares) and an arithmetic part modulo the RNS ciphertext modulus Q (CKKS encoding,
// public-key encryption with the user's randomness, BDOP commitment to the noises).
package zkbpp

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	"encoding/binary"
	"math/bits"
)

// SeedBytes is the size of every party's seed (128-bit seeds as in ZKB++).
const SeedBytes = 16

// tape is a party's random tape: AES-128-CTR keyed with SHA-256(label || seed).
type tape struct {
	stream cipher.Stream
	buf    []byte
	pos    int
}

func newTape(seed []byte, label string) *tape {
	h := sha256.New()
	h.Write([]byte("secinfer/zkbpp/tape/v1/" + label + "/"))
	h.Write(seed)
	key := h.Sum(nil)[:16]
	blk, err := aes.NewCipher(key)
	if err != nil {
		panic(err)
	}
	iv := make([]byte, aes.BlockSize)
	return &tape{stream: cipher.NewCTR(blk, iv), buf: make([]byte, 4096), pos: 4096}
}

func (t *tape) refill() {
	for i := range t.buf {
		t.buf[i] = 0
	}
	t.stream.XORKeyStream(t.buf, t.buf)
	t.pos = 0
}

func (t *tape) u32() uint32 {
	if t.pos+4 > len(t.buf) {
		t.refill()
	}
	v := binary.LittleEndian.Uint32(t.buf[t.pos:])
	t.pos += 4
	return v
}

func (t *tape) u64() uint64 {
	if t.pos+8 > len(t.buf) {
		t.refill()
	}
	v := binary.LittleEndian.Uint64(t.buf[t.pos:])
	t.pos += 8
	return v
}

// modq draws a uniform element of Z_q by rejection sampling.
func (t *tape) modq(q uint64) uint64 {
	mask := uint64(1)<<uint(bits.Len64(q)) - 1
	if bits.Len64(q) == 64 {
		mask = ^uint64(0)
	}
	for {
		if v := t.u64() & mask; v < q {
			return v
		}
	}
}

// deriveSeed derives the seed of (repetition, party) from the prover's master seed.
func deriveSeed(master []byte, rep, party int) []byte {
	h := sha256.New()
	h.Write([]byte("secinfer/zkbpp/seed/v1"))
	h.Write(master)
	var b [8]byte
	binary.LittleEndian.PutUint32(b[:4], uint32(rep))
	binary.LittleEndian.PutUint32(b[4:], uint32(party))
	h.Write(b[:])
	return h.Sum(nil)[:SeedBytes]
}
