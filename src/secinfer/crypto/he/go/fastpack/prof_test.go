package fastpack

import (
	"testing"

	"github.com/tuneinsight/lattigo/v6/core/rlwe"
	"github.com/tuneinsight/lattigo/v6/utils"
)

func BenchmarkPackBase2(b *testing.B) {
	params, _ := rlwe.NewParametersFromLiteral(rlwe.ParametersLiteral{LogN: 11, LogQ: []int{53}, NTTFlag: true})
	kgen := rlwe.NewKeyGenerator(params)
	sk := kgen.GenSecretKeyNew()
	var gks []*rlwe.GaloisKey
	for _, g := range PackGaloisElements(params, 0) {
		gks = append(gks, kgen.GenGaloisKeyNew(g, sk, rlwe.EvaluationKeyParameters{BaseTwoDecomposition: utils.Pointy(18)}))
	}
	p := NewPacker(params, rlwe.NewMemEvaluationKeySet(nil, gks...))
	N := params.N()
	bt := &Batch{N: N, Depth: 0, Count: N, B: make([]uint64, N), A: make([]uint64, N*N)}
	for i := range bt.A {
		bt.A[i] = uint64(i*7919) % 1000003
	}
	pos := make([]int, N)
	for i := range pos {
		pos[i] = i
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.Pack(bt, pos, 1)
	}
}
