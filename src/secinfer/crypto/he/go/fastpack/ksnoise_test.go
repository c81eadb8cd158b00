package fastpack

import (
	"math"
	"testing"

	"github.com/tuneinsight/lattigo/v6/core/rlwe"
	"github.com/tuneinsight/lattigo/v6/utils"
)

func TestKSNoiseBase2(t *testing.T) {
	params, err := rlwe.NewParametersFromLiteral(rlwe.ParametersLiteral{LogN: 11, LogQ: []int{53}, NTTFlag: true})
	if err != nil {
		t.Fatal(err)
	}
	kgen := rlwe.NewKeyGenerator(params)
	sk := kgen.GenSecretKeyNew()
	for _, w := range []int{18, 27} {
		gk := kgen.GenGaloisKeyNew(5, sk, rlwe.EvaluationKeyParameters{BaseTwoDecomposition: utils.Pointy(w)})
		eval := rlwe.NewEvaluator(params, rlwe.NewMemEvaluationKeySet(nil, gk))
		enc := rlwe.NewEncryptor(params, sk)
		dec := rlwe.NewDecryptor(params, sk)
		ct := rlwe.NewCiphertext(params, 1, 0)
		pt := rlwe.NewPlaintext(params, 0)
		enc.Encrypt(pt, ct)
		out := rlwe.NewCiphertext(params, 1, 0)
		eval.Automorphism(ct, 5, out)
		for name, c := range map[string]*rlwe.Ciphertext{"fresh": ct, "ks": out} {
			p := dec.DecryptNew(c)
			r := params.RingQ().AtLevel(0)
			r.INTT(p.Value, p.Value)
			q := r.SubRings[0].Modulus
			mx := 0.0
			for _, v := range p.Value.Coeffs[0] {
				x := float64(v)
				if v > q/2 {
					x = float64(q - v)
				}
				mx = math.Max(mx, x)
			}
			t.Logf("w=%d %s: log2 max noise %.1f", w, name, math.Log2(mx+1))
		}
	}
}
