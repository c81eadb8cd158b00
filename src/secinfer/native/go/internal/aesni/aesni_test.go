package aesni

import (
	"bytes"
	"crypto/aes"
	"math/rand"
	"testing"
)

func TestEqualsCryptoAES(t *testing.T) {
	if !useAsm {
		t.Log("no AES-NI: the fallback is tested")
	}
	r := rand.New(rand.NewSource(1))
	for trial := 0; trial < 20; trial++ {
		key := make([]byte, 16)
		r.Read(key)
		c, err := New(key)
		if err != nil {
			t.Fatal(err)
		}
		ref, _ := aes.NewCipher(key)
		for _, n := range []int{0, 1, 7, 8, 9, 16, 37} {
			buf := make([]byte, 16*n)
			r.Read(buf)
			want := make([]byte, len(buf))
			for i := 0; i < n; i++ {
				ref.Encrypt(want[16*i:], buf[16*i:16*i+16])
			}
			c.EncryptBlocks(buf)
			if !bytes.Equal(buf, want) {
				t.Fatalf("key %x, %d blocks: differs from crypto/aes", key, n)
			}
		}
	}
}

func BenchmarkEncrypt1024(b *testing.B) {
	c, _ := New(make([]byte, 16))
	buf := make([]byte, 16*1024)
	b.SetBytes(int64(len(buf)))
	for i := 0; i < b.N; i++ {
		c.EncryptBlocks(buf)
	}
}
