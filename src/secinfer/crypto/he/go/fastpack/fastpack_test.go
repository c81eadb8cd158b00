package fastpack

import (
	"math/big"
	"testing"
	"time"

	"github.com/tuneinsight/lattigo/v6/core/rlwe"
	"github.com/tuneinsight/lattigo/v6/ring"
	"github.com/tuneinsight/lattigo/v6/utils"
	"github.com/tuneinsight/lattigo/v6/utils/sampling"
)

type fixture struct {
	params rlwe.Parameters
	sk     *rlwe.SecretKey
	enc    *rlwe.Encryptor
	dec    *rlwe.Decryptor
	packer *Packer
	delta  uint64
}

func newFixture(t testing.TB, logN int, logQ, logP []int, depth int) *fixture {
	params, err := rlwe.NewParametersFromLiteral(rlwe.ParametersLiteral{LogN: logN, LogQ: logQ, LogP: logP, NTTFlag: true})
	if err != nil {
		t.Fatal(err)
	}
	kgen := rlwe.NewKeyGenerator(params)
	sk := kgen.GenSecretKeyNew()
	var evp []rlwe.EvaluationKeyParameters
	if len(logP) == 0 {
		w := 18
		if depth > 0 { // (the depth argument selects the digit width for base-2 fixtures)
			w = depth
		}
		evp = append(evp, rlwe.EvaluationKeyParameters{BaseTwoDecomposition: utils.Pointy(w)})
	}
	gks := kgen.GenGaloisKeysNew(PackGaloisElements(params, 0), sk, evp...)
	evk := rlwe.NewMemEvaluationKeySet(nil, gks...)
	f := &fixture{params: params, sk: sk, enc: rlwe.NewEncryptor(params, sk), dec: rlwe.NewDecryptor(params, sk),
		packer: NewPacker(params, evk), delta: 1 << 20}
	if len(logP) == 0 {
		f.delta = 1 << 42 // base-2^w digits: key-switch noise ~2^(w + 8); 125 delta 2^depth < q/2
	}
	return f
}

// encryptPowers encrypts delta * m(X^d) for every d of D_depth (coefficient domain out).
func (f *fixture) encryptPowers(m []int64, depth int) ExtractSource {
	r := f.params.RingQ()
	N := f.params.N()
	var src ExtractSource
	for _, d := range PreTraceElements(f.params, depth) {
		pt := rlwe.NewPlaintext(f.params, 0)
		pt.IsNTT = false
		for j, v := range m {
			e := (uint64(j) * d) % uint64(2*N)
			x := v * int64(f.delta)
			if e >= uint64(N) {
				e -= uint64(N)
				x = -x
			}
			q := r.SubRings[0].Modulus
			pt.Value.Coeffs[0][e] = uint64((x%int64(q) + int64(q)) % int64(q))
		}
		r0 := r.AtLevel(0)
		r0.NTT(pt.Value, pt.Value)
		pt.IsNTT = true
		ct := rlwe.NewCiphertext(f.params, 1, 0)
		if err := f.enc.Encrypt(pt, ct); err != nil {
			panic(err)
		}
		r0.INTT(ct.Value[0], ct.Value[0])
		r0.INTT(ct.Value[1], ct.Value[1])
		src.C0 = append(src.C0, [][]uint64{ct.Value[0].Coeffs[0]})
		src.C1 = append(src.C1, [][]uint64{ct.Value[1].Coeffs[0]})
	}
	return src
}

func (f *fixture) decryptCentered(ct *rlwe.Ciphertext) []int64 {
	pt := f.dec.DecryptNew(ct)
	r := f.params.RingQ().AtLevel(0)
	if pt.IsNTT {
		r.INTT(pt.Value, pt.Value)
	}
	q := r.SubRings[0].Modulus
	out := make([]int64, f.params.N())
	for j, v := range pt.Value.Coeffs[0] {
		if v > q/2 {
			out[j] = -int64(q - v)
		} else {
			out[j] = int64(v)
		}
	}
	return out
}

func TestPackExact(t *testing.T) {
	testPackExact(t, newFixture(t, 9, []int{50}, []int{50}, 0))
}

func TestPackExactBase2(t *testing.T) {
	testPackExact(t, newFixture(t, 9, []int{53}, nil, 0))
}

func TestPackExactBase27(t *testing.T) {
	testPackExact(t, newFixture(t, 9, []int{53}, nil, 27))
}

func testPackExact(t *testing.T, f *fixture) {
	N := f.params.N()
	prng, _ := sampling.NewPRNG()
	_ = prng
	m := make([]int64, N)
	for j := range m {
		m[j] = int64(j%251) - 125
	}
	for _, depth := range []int{0, 1, 2} {
		src := f.encryptPowers(m, depth)
		for _, n := range []int{1, 2, 3, 16, N} {
			b := &Batch{N: N, Level: 0, Depth: depth, Count: n}
			b.B = make([]uint64, n*b.G())
			b.A = make([]uint64, n*N)
			chunk := make([]int, n)
			index := make([]int, n)
			pos := make([]int, n)
			np2 := 1
			for np2 < n {
				np2 *= 2
			}
			for i := 0; i < n; i++ {
				index[i] = (i * 7) % N
				pos[i] = i * (N / np2)
			}
			if err := Extract(f.params, []ExtractSource{src}, chunk, index, b, 2); err != nil {
				t.Fatal(err)
			}
			ct, ks, err := f.packer.Pack(b, pos, 2)
			if err != nil {
				t.Fatal(err)
			}
			if want := ExpectedKeySwitches(f.params.LogN(), n, depth); ks != want {
				t.Errorf("depth %d n %d: %d key switches, want %d", depth, n, ks, want)
			}
			got := f.decryptCentered(ct)
			scale := int64(f.delta) << depth
			var maxNoise int64
			inPos := map[int]int{}
			for i, p := range pos {
				inPos[p] = i
			}
			for j := 0; j < N; j++ {
				want := int64(0)
				if i, ok := inPos[j]; ok {
					want = m[index[i]] * scale
				}
				d := got[j] - want
				if d < 0 {
					d = -d
				}
				if d > maxNoise {
					maxNoise = d
				}
			}
			for _, p := range pos[:min(len(pos), 4)] {
				t.Logf("pos %d got %d want %d (idx %d)", p, got[p], m[index[inPos[p]]]*scale, index[inPos[p]])
			}
			if maxNoise > scale/2 {
				t.Fatalf("depth %d n %d: noise %d over scale/2 %d", depth, n, maxNoise, scale/2)
			}
			t.Logf("depth %d n %d: ks %d, max noise 2^%.1f", depth, n, ks, log2(maxNoise))
		}
	}
}

func log2(x int64) float64 {
	f, _ := new(big.Float).SetInt64(x + 1).Float64()
	l := 0.0
	for f >= 2 {
		f /= 2
		l++
	}
	return l + f - 1
}

func BenchmarkPackFull(b *testing.B) {
	for _, cfg := range []struct{ logN, logQ, logP int }{{11, 27, 26}} {
		f := newFixture(b, cfg.logN, []int{cfg.logQ}, []int{cfg.logP}, 0)
		N := f.params.N()
		m := make([]int64, N)
		src := f.encryptPowers(m, 0)
		bt := &Batch{N: N, Level: 0, Depth: 0, Count: N, B: make([]uint64, N), A: make([]uint64, N*N)}
		chunk, index, pos := make([]int, N), make([]int, N), make([]int, N)
		for i := range index {
			index[i], pos[i] = i, i
		}
		if err := Extract(f.params, []ExtractSource{src}, chunk, index, bt, 1); err != nil {
			b.Fatal(err)
		}
		for _, depth := range []int{0, 1, 2} {
			bt.Depth = depth
			bt.B = make([]uint64, N<<depth)
			t0 := time.Now()
			_, ks, err := f.packer.Pack(bt, pos, 1)
			if err != nil {
				b.Fatal(err)
			}
			el := time.Since(t0)
			b.Logf("logN %d depth %d: %d key switches, %.3f ms per coefficient, %.1f us per key switch", cfg.logN, depth, ks,
				float64(el.Microseconds())/1000/float64(N), float64(el.Microseconds())/float64(ks))
		}
	}
	_ = ring.Standard
}

func BenchmarkNTT2048(b *testing.B) {
	f := newFixture(b, 11, []int{27}, []int{26}, 0)
	r := f.params.RingQ().AtLevel(0)
	p := r.NewPoly()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.NTT(p, p)
	}
}

func BenchmarkAutomorphism2048(b *testing.B) {
	f := newFixture(b, 11, []int{27}, []int{26}, 0)
	ct := rlwe.NewCiphertext(f.params, 1, 0)
	ct.IsNTT = true
	out := rlwe.NewCiphertext(f.params, 1, 0)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f.packer.eval.Automorphism(ct, 4095, out)
	}
}
