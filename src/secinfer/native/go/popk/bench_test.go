package popk

// Go-only timings of the proof-of-plaintext-knowledge map at benchmark A's size (N = 2^14,
// 7 primes, a 1800-coefficient message support, e0 and e1 rounded away), row by row:
//   go test -run xxx -bench 'Popk|NTT|HashRow|NewPoly' -benchtime 50x -count 3
// (one row: the image, the image with both components rounded, its pieces: one NTT /
// inverse NTT of a 7-prime polynomial, hashing one row's residues, three allocations).

import (
	"crypto/sha256"
	"encoding/binary"
	"math/big"
	"math/rand"
	"testing"

	"github.com/tuneinsight/lattigo/v6/core/rlwe"
	"github.com/tuneinsight/lattigo/v6/ring"
	"github.com/tuneinsight/lattigo/v6/schemes/ckks"
)

func popkBenchSetup(b *testing.B) (*ring.Ring, *rlwe.PublicKey, []int64, [4]int) {
	p, err := ckks.NewParametersFromLiteral(ckks.ParametersLiteral{LogN: 14, LogQ: []int{60, 40, 40, 40, 40, 40, 40}, LogP: []int{61, 61}, LogDefaultScale: 40})
	if err != nil {
		b.Fatal(err)
	}
	_, pk := rlwe.NewKeyGenerator(p).GenKeyPairNew()
	N := p.N()
	ls := [4]int{2, 1, 0, 0}
	z := make([]int64, 3*N)
	for j := 0; j < 1800; j++ {
		z[j] = rand.Int63n(1 << 40)
		z[N+j] = rand.Int63n(1 << 38)
	}
	for j := 0; j < N; j++ {
		z[2*N+j] = rand.Int63n(1<<28) - (1 << 27)
	}
	return p.RingQ(), pk, z, ls
}

func BenchmarkPopkImage(b *testing.B) {
	r, pk, z, ls := popkBenchSetup(b)
	scr := [5]ring.Poly{r.NewPoly(), r.NewPoly(), r.NewPoly(), r.NewPoly(), r.NewPoly()}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		Image(r, pk, new(big.Int).Lsh(big.NewInt(1), 141), ls, z, r.N(), nil, nil, ring.Poly{}, &scr)
	}
}

func BenchmarkPopkImageRound(b *testing.B) {
	r, pk, z, ls := popkBenchSetup(b)
	scr := [5]ring.Poly{r.NewPoly(), r.NewPoly(), r.NewPoly(), r.NewPoly(), r.NewPoly()}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c0, c1 := Image(r, pk, new(big.Int).Lsh(big.NewInt(1), 141), ls, z, r.N(), nil, nil, ring.Poly{}, &scr)
		Round(r, c0, 6, nil)
		Round(r, c1, 6, nil)
	}
}

func BenchmarkHashRow(b *testing.B) {
	r, _, _, _ := popkBenchSetup(b)
	p := r.NewPoly()
	buf := make([]byte, 8*r.N())
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h := sha256.New()
		for k := 0; k < 2; k++ {
			for l := 0; l <= r.Level(); l++ {
				for j, c := range p.Coeffs[l] {
					binary.LittleEndian.PutUint64(buf[8*j:], c)
				}
				h.Write(buf)
			}
		}
		h.Sum(nil)
	}
}

func BenchmarkNewPoly3(b *testing.B) {
	r, _, _, _ := popkBenchSetup(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_, _, _ = r.NewPoly(), r.NewPoly(), r.NewPoly()
	}
}

// BenchmarkTransforms: the ring's forward, inverse and lazy forward NTT on one polynomial.
func BenchmarkTransforms(b *testing.B) {
	r, _, _, _ := popkBenchSetup(b)
	p := r.NewPoly()
	for _, t := range []struct {
		name string
		f    func(in, out ring.Poly)
	}{{"NTT", r.NTT}, {"INTT", r.INTT}, {"NTTLazy", r.NTTLazy}} {
		b.Run(t.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				t.f(p, p)
			}
		})
	}
}
