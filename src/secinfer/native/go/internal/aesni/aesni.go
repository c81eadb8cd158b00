// Package aesni encrypts many independent AES-128 blocks with one fixed key, eight at a
// time in flight with AES-NI on amd64 (the garbled-circuit gate hash of secinfer/native/gc
// needs a block cipher call per hash; Go's crypto/aes encrypts one block per call). On
// other machines, or without AES-NI, it falls back to crypto/aes block by block. Tested
// equal to crypto/aes.
package aesni

import (
	"crypto/aes"
	"crypto/cipher"
)

// Cipher is one expanded AES-128 key.
type Cipher struct {
	rk    [176]byte // the 11 round keys, FIPS-197 byte order (what AESENC takes)
	block cipher.Block
}

// New expands a 16-byte key.
func New(key []byte) (*Cipher, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	if len(key) != 16 {
		return nil, aes.KeySizeError(len(key))
	}
	c := &Cipher{block: b}
	expand128(key, &c.rk)
	return c, nil
}

// Block is the crypto/aes cipher of the same key.
func (c *Cipher) Block() cipher.Block { return c.block }

// EncryptBlocks encrypts buf (a multiple of 16 bytes) in place, block by block (ECB).
func (c *Cipher) EncryptBlocks(buf []byte) {
	n := len(buf) / 16
	i := 0
	if useAsm {
		for ; i+8 <= n; i += 8 {
			encrypt8(&c.rk[0], &buf[16*i])
		}
	}
	for ; i < n; i++ {
		c.block.Encrypt(buf[16*i:16*i+16], buf[16*i:16*i+16])
	}
}

var sbox = func() (s [256]byte) {
	mul := func(a, b byte) byte { // GF(2^8) mod x^8 + x^4 + x^3 + x + 1
		var p byte
		for b != 0 {
			if b&1 != 0 {
				p ^= a
			}
			hi := a & 0x80
			a <<= 1
			if hi != 0 {
				a ^= 0x1b
			}
			b >>= 1
		}
		return p
	}
	rotl := func(x byte, k uint) byte { return x<<k | x>>(8-k) }
	for x := 0; x < 256; x++ {
		inv := byte(0)
		if x != 0 { // x^254
			inv = 1
			for i := 0; i < 254; i++ {
				inv = mul(inv, byte(x))
			}
		}
		s[x] = inv ^ rotl(inv, 1) ^ rotl(inv, 2) ^ rotl(inv, 3) ^ rotl(inv, 4) ^ 0x63
	}
	return
}()

// expand128 is the AES-128 key schedule (FIPS-197 Sec. 5.2), round keys as bytes.
func expand128(key []byte, rk *[176]byte) {
	copy(rk[:16], key)
	rcon := byte(1)
	for i := 16; i < 176; i += 4 {
		t := [4]byte{rk[i-4], rk[i-3], rk[i-2], rk[i-1]}
		if i%16 == 0 {
			t = [4]byte{sbox[t[1]] ^ rcon, sbox[t[2]], sbox[t[3]], sbox[t[0]]}
			hi := rcon & 0x80
			rcon <<= 1
			if hi != 0 {
				rcon ^= 0x1b
			}
		}
		for j := 0; j < 4; j++ {
			rk[i+j] = rk[i-16+j] ^ t[j]
		}
	}
}
