package main

// Go-only timings of the operations behind `secinfer bench he`'s cheap rows (no cgo,
// no Python), to separate arithmetic from call overhead:
//   go test -run xxx -bench . -benchtime 2000x -count 5
// Lattigo's MulNew / AddNew (fresh output), Lattigo's Mul / Add into an existing output,
// the fast path of fastops.go (cached Montgomery plaintext), and the pieces: allocating
// a ciphertext, converting a plaintext to Montgomery form, one coefficient-wise product.

import (
	"testing"

	"github.com/tuneinsight/lattigo/v6/core/rlwe"
	"github.com/tuneinsight/lattigo/v6/schemes/ckks"
)

func benchSetup(b *testing.B, level int) (ckks.Parameters, *ckks.Evaluator, *rlwe.Ciphertext, *rlwe.Ciphertext, *rlwe.Plaintext) {
	p, err := ckks.NewParametersFromLiteral(ckks.ParametersLiteral{LogN: 13, LogQ: []int{60, 40, 40}, LogP: []int{61}, LogDefaultScale: 40})
	if err != nil {
		b.Fatal(err)
	}
	kgen := rlwe.NewKeyGenerator(p)
	sk, pk := kgen.GenKeyPairNew()
	_ = sk
	enc := ckks.NewEncoder(p)
	vals := make([]complex128, p.MaxSlots())
	for i := range vals {
		vals[i] = complex(float64(i%7)/7, 0)
	}
	pt := ckks.NewPlaintext(p, level)
	if err := enc.Encode(vals, pt); err != nil {
		b.Fatal(err)
	}
	encr := rlwe.NewEncryptor(p, pk)
	ct, _ := encr.EncryptNew(pt)
	ct2, _ := encr.EncryptNew(pt)
	return p, ckks.NewEvaluator(p, nil), ct, ct2, pt
}

func BenchmarkMulPlainNewL2(b *testing.B) { benchMulNew(b, 2) }
func BenchmarkMulPlainNewL0(b *testing.B) { benchMulNew(b, 0) }
func benchMulNew(b *testing.B, level int) {
	_, ev, ct, _, pt := benchSetup(b, level)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := ev.MulNew(ct, pt); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMulPlainIntoL2(b *testing.B) { benchMulInto(b, 2) }
func BenchmarkMulPlainIntoL0(b *testing.B) { benchMulInto(b, 0) }
func benchMulInto(b *testing.B, level int) {
	p, ev, ct, _, pt := benchSetup(b, level)
	out := ckks.NewCiphertext(p, 1, level)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := ev.Mul(ct, pt, out); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAddNewL2(b *testing.B) {
	_, ev, ct, ct2, _ := benchSetup(b, 2)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := ev.AddNew(ct, ct2); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAddIntoL2(b *testing.B) {
	p, ev, ct, ct2, _ := benchSetup(b, 2)
	out := ckks.NewCiphertext(p, 1, 2)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := ev.Add(ct, ct2, out); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkNewCiphertextL2(b *testing.B) {
	p, _, _, _, _ := benchSetup(b, 2)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_ = ckks.NewCiphertext(p, 1, 2)
	}
}

func BenchmarkMFormL2(b *testing.B) {
	p, _, _, _, pt := benchSetup(b, 2)
	r := p.RingQ().AtLevel(2)
	buf := r.NewPoly()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.MForm(pt.Value, buf)
	}
}

func BenchmarkMulCoeffsMontL2(b *testing.B) {
	p, _, ct, _, pt := benchSetup(b, 2)
	r := p.RingQ().AtLevel(2)
	buf := r.NewPoly()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.MulCoeffsMontgomery(pt.Value, ct.Value[0], buf)
	}
}

func BenchmarkHandlePutGet(b *testing.B) {
	for i := 0; i < b.N; i++ {
		h := put(&CT{})
		_ = get[*CT](h, "ciphertext")
		tableMu.Lock()
		delete(table, h)
		tableMu.Unlock()
	}
}

func benchFast(b *testing.B, level int, accumulate bool) {
	p, ev, ct, _, pt := benchSetup(b, level)
	e := &Eval{ev: ev}
	wpt := &PT{v: pt}
	out := ckks.NewCiphertext(p, 1, level)
	if !e.mulPlain(ct, wpt, out, false) {
		b.Fatal("fast path not taken")
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if !e.mulPlain(ct, wpt, out, accumulate) {
			b.Fatal("fast path not taken")
		}
	}
}

func BenchmarkFastMulPlainIntoL2(b *testing.B) { benchFast(b, 2, false) }
func BenchmarkFastMulPlainIntoL0(b *testing.B) { benchFast(b, 0, false) }
func BenchmarkFastMulPlainAddL2(b *testing.B)  { benchFast(b, 2, true) }

func BenchmarkFastMulPlainNewL2(b *testing.B) {
	_, ev, ct, _, pt := benchSetup(b, 2)
	e := &Eval{ev: ev}
	wpt := &PT{v: pt}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if e.mulPlainNew(ct, wpt) == nil {
			b.Fatal("fast path not taken")
		}
	}
}

// The fast path must give exactly Lattigo's result.
func TestFastMulPlainMatchesLattigo(t *testing.T) {
	b := &testing.B{}
	p, ev, ct, _, pt := benchSetup(b, 2)
	e := &Eval{ev: ev}
	wpt := &PT{v: pt}
	want, err := ev.MulNew(ct, pt)
	if err != nil {
		t.Fatal(err)
	}
	got := e.mulPlainNew(ct, wpt)
	if got == nil || !got.v.Equal(want) {
		t.Fatal("fast ciphertext x plaintext differs from Lattigo's Mul")
	}
	acc := want.CopyNew()
	wantAcc := want.CopyNew()
	if err := ev.MulThenAdd(ct, pt, wantAcc); err != nil {
		t.Fatal(err)
	}
	if !e.mulPlain(ct, wpt, acc, true) || !acc.Equal(wantAcc) {
		t.Fatal("fast multiply-accumulate differs from Lattigo's MulThenAdd")
	}
	_ = p
}
