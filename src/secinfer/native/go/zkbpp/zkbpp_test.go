package zkbpp

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/bits"
	mrand "math/rand"
	"os"
	"testing"

	"github.com/tuneinsight/lattigo/v6/ring"
)

func testPrimes(t testing.TB, logN, n int) []uint64 {
	g := ring.NewNTTFriendlyPrimesGenerator(40, uint64(2<<uint(logN)))
	ps, err := g.NextDownstreamPrimes(n)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// honestInstance builds a random statement/witness pair the plain way (no MPC).
func honestInstance(t testing.TB, cfg *Config, rng *mrand.Rand) (*Statement, *Witness, []int64) {
	N := cfg.N()
	w := &Witness{}
	d := make([]int64, cfg.NPoints())
	nb := cfg.DataBits / 8
	for i := 0; i < cfg.NMsgs; i++ {
		m := make([]byte, cfg.MsgBytes)
		rng.Read(m)
		w.Msgs = append(w.Msgs, m)
		for j := 0; j < cfg.Points; j++ {
			b := m[j*nb:]
			switch cfg.DataBits {
			case 8:
				d[i*cfg.Points+j] = int64(int8(b[0]))
			case 16:
				d[i*cfg.Points+j] = int64(int16(binary.BigEndian.Uint16(b)))
			default:
				d[i*cfg.Points+j] = int64(int32(binary.BigEndian.Uint32(b)))
			}
		}
	}
	for k := range w.Polys {
		w.Polys[k] = make([]int64, N)
		for j := range w.Polys[k] {
			w.Polys[k][j] = int64(rng.Intn(7)) - 3
		}
	}
	st := &Statement{}
	for _, m := range w.Msgs {
		st.Digests = append(st.Digests, sha256.Sum256(m))
	}
	rq, _ := ring.NewRing(N, cfg.Primes)
	for k := range st.Public {
		p := rq.NewPoly()
		for l, q := range cfg.Primes {
			for j := range p.Coeffs[l] {
				p.Coeffs[l][j] = rng.Uint64() % q
			}
		}
		st.Public[k] = p.Coeffs
	}
	// plain evaluation with the ring
	toPoly := func(v []int64) ring.Poly {
		p := rq.NewPoly()
		for l, q := range cfg.Primes {
			for j, x := range v {
				p.Coeffs[l][j] = signedMod(x, q)
			}
		}
		return p
	}
	mul := func(a [][]uint64, b ring.Poly) ring.Poly {
		A := rq.NewPoly()
		copy(A.Coeffs, a)
		A = *A.CopyNew()
		B := *b.CopyNew()
		rq.NTT(A, A)
		rq.NTT(B, B)
		rq.MulCoeffsBarrett(A, B, A)
		rq.INTT(A, A)
		return A
	}
	x := [8]ring.Poly{}
	for k := range x {
		x[k] = toPoly(w.Polys[k])
	}
	m := rq.NewPoly()
	enc, err := Encode(cfg, d)
	if err != nil {
		t.Fatal(err)
	}
	copy(m.Coeffs, enc)
	outs := [6]ring.Poly{}
	outs[0] = mul(st.Public[0], x[0])
	rq.Add(outs[0], x[1], outs[0])
	rq.Add(outs[0], m, outs[0])
	outs[1] = mul(st.Public[1], x[0])
	rq.Add(outs[1], x[2], outs[1])
	outs[2] = *x[3].CopyNew()
	for i := 0; i < 4; i++ {
		rq.Add(outs[2], mul(st.Public[2+i], x[4+i]), outs[2])
	}
	for j := 0; j < 3; j++ {
		outs[3+j] = mul(st.Public[6+j], x[7])
		rq.Add(outs[3+j], x[4+j], outs[3+j])
		rq.Add(outs[3+j], x[j], outs[3+j])
	}
	for k := range outs {
		st.Output[k] = outs[k].Coeffs
	}
	return st, w, d
}

// checkEvaluation: the circuit's digests equal crypto/sha256's and its arithmetic output
// equals the plain computation's, for an honest instance.
func checkEvaluation(t *testing.T, cfg *Config, st *Statement, w *Witness, what string) {
	t.Helper()
	digs, outA, err := Evaluate(cfg, st, w, []byte("0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range digs {
		if digs[i] != st.Digests[i] {
			t.Fatalf("%s: digest %d differs from crypto/sha256", what, i)
		}
	}
	for k := range outA {
		for l := range outA[k] {
			for j := range outA[k][l] {
				if outA[k][l][j] != st.Output[k][l][j] {
					t.Fatalf("%s: arithmetic output %d differs at (%d, %d)", what, k, l, j)
				}
			}
		}
	}
}

func TestSHA256CircuitMatchesStdlib(t *testing.T) {
	rng := mrand.New(mrand.NewSource(1))
	for _, mb := range []int{3, 24, 55, 56, 64, 130} {
		cfg := &Config{LogN: 4, Primes: testPrimes(t, 4, 1), Reps: 1, MsgBytes: mb, DataBits: 8, NMsgs: 2, Points: 1, LogScale: 20}
		st, w, _ := honestInstance(t, cfg, rng)
		checkEvaluation(t, cfg, st, w, fmt.Sprintf("msg bytes %d", mb))
	}
}

func TestProveVerify(t *testing.T) {
	rng := mrand.New(mrand.NewSource(2))
	cfg := &Config{LogN: 5, Primes: testPrimes(t, 5, 2), Reps: 6, MsgBytes: 24, DataBits: 16, NMsgs: 3, Points: 1, LogScale: 25}
	st, w, _ := honestInstance(t, cfg, rng)
	seed := make([]byte, 32)
	rand.Read(seed)
	ctx := []byte("session-1")
	proof, err := Prove(cfg, st, w, seed, ctx)
	if err != nil {
		t.Fatal(err)
	}
	if f, err := Verify(cfg, st, proof, ctx); err != nil || f != 0 {
		t.Fatalf("honest proof rejected: fails=%d err=%v", f, err)
	}
	if f, _ := Verify(cfg, st, proof, []byte("session-2")); f != FailChallenge {
		t.Fatalf("other context: fails=%d", f)
	}
	bad := append([]byte(nil), proof...)
	bad[len(bad)-8] ^= 1 // lowest byte of the last multiplication output of an opened view
	if f, _ := Verify(cfg, st, bad, ctx); f&FailView == 0 {
		t.Fatalf("tampered view accepted: fails=%d", f)
	}
	// another statement: a different ciphertext
	st2 := *st
	st2.Output[0] = [][]uint64{append([]uint64(nil), st.Output[0][0]...), st.Output[0][1]}
	st2.Output[0][0][0] = (st2.Output[0][0][0] + 1) % cfg.Primes[0]
	p2, _ := Prove(cfg, &st2, w, seed, ctx)
	if f, _ := Verify(cfg, &st2, p2, ctx); f != FailEncryption {
		t.Fatalf("false encryption statement: fails=%d", f)
	}
	st3 := *st
	st3.Digests = append([][32]byte{{1}}, st.Digests[1:]...)
	p3, _ := Prove(cfg, &st3, w, seed, ctx)
	if f, _ := Verify(cfg, &st3, p3, ctx); f != FailDigest {
		t.Fatalf("false digest statement: fails=%d", f)
	}
	if _, err := Verify(cfg, st, proof[:len(proof)-3], ctx); err != ErrMalformed {
		t.Fatalf("truncated proof: %v", err)
	}
}

// viewBits is the size in bits of one player's view for cfg (the circuit's recorded
// gate outputs), measured on an honest instance.
func viewBits(t testing.TB, cfg *Config) int {
	rng := mrand.New(mrand.NewSource(4))
	st, w, _ := honestInstance(t, cfg, rng)
	pd, err := st.prepare(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := &run{primes: cfg.Primes}
	var in [3]*inputs
	for p := 0; p < 3; p++ {
		s := deriveSeed([]byte("0123456789abcdef"), 0, p)
		r.andTape[p], r.mulTape[p], r.views[p] = newTape(s, "and"), newTape(s, "mul"), &view{}
		if p < 2 {
			in[p] = seededInputs(pd, s)
		}
	}
	wN, _ := witnessNTT(pd, w)
	if in[2], err = lastShare(pd, w, wN, in[0], in[1]); err != nil {
		t.Fatal(err)
	}
	r.evaluate(pd, pd.rq, in, [3]bool{true, true, true})
	return r.views[0].out.n
}

// The smart-metering message (24 bytes, 16-bit data point, one block) with one 53-bit
// prime: SHA-256 with the public words folded (no gates on the IV, the padding or the
// feed-forward of the IV) and the conversion's 16 + 1 gate outputs.
func TestGateCountPerMessage(t *testing.T) {
	cfg := &Config{LogN: 5, Primes: testPrimes53(t, 5), Reps: 1, MsgBytes: 24, DataBits: 16, NMsgs: 2, Points: 1, LogScale: 10}
	per := viewBits(t, cfg) / cfg.NMsgs
	conv := 17 * bits.Len64(cfg.Primes[0])
	t.Logf("view bits per message: %d (SHA-256 %d, conversion %d)", per, per-conv, conv)
	if per-conv > 21100 || per-conv < 20500 {
		t.Fatalf("SHA-256 part has %d recorded bits per block", per-conv)
	}
}

func testPrimes53(t testing.TB, logN int) []uint64 {
	g := ring.NewNTTFriendlyPrimesGenerator(53, uint64(2<<uint(logN)))
	ps, err := g.NextUpstreamPrimes(1)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// The proof's length is the documented layout exactly, and at the smart-metering size
// (1,024 one-block messages, N = 2^11, one 53-bit prime, 219 repetitions) its expected
// length is below the paper's 643.4 MB [CRISP-certified Sec. 6.2].
func TestProofLayoutAndSmartMeteringSize(t *testing.T) {
	rng := mrand.New(mrand.NewSource(5))
	cfg := &Config{LogN: 5, Primes: testPrimes53(t, 5), Reps: 9, MsgBytes: 24, DataBits: 16, NMsgs: 3, Points: 1, LogScale: 10}
	st, w, _ := honestInstance(t, cfg, rng)
	proof, err := Prove(cfg, st, w, []byte("0123456789abcdef"), []byte("ctx"))
	if err != nil {
		t.Fatal(err)
	}
	pd, _ := st.prepare(cfg)
	var ch [32]byte
	copy(ch[:], proof[len(magic)+4:])
	view := (viewBits(t, cfg) + 7) / 8
	want := len(magic) + 4 + 32
	for _, e := range challengeTrits(ch, cfg.Reps) {
		want += 9*32 + 2*SeedBytes + 4 + view
		if e != 0 {
			want += inputBytes(pd)
		}
	}
	if len(proof) != want {
		t.Fatalf("proof has %d bytes, layout says %d", len(proof), want)
	}
	// smart metering: per-message view bits are the same for every message
	sm := &Config{LogN: 11, Primes: testPrimes53(t, 11), Reps: 219, MsgBytes: 24, DataBits: 16, NMsgs: 2, Points: 1, LogScale: 25}
	perMsg := viewBits(t, sm) / 2
	const n = 1024
	qb := bits.Len64(sm.Primes[0])
	in2 := n*24 + (NumSecretPolys*qb*2048+7)/8
	perRep := 9*32 + 2*SeedBytes + 4 + (perMsg*n+7)/8
	expected := 219 * (float64(perRep) + 2.0/3.0*float64(in2))
	t.Logf("smart metering: %d view bits per message, expected proof %.1f MB", perMsg, expected/1e6)
	if expected > 643.4e6 {
		t.Fatalf("expected proof %.1f MB exceeds the paper's 643.4 MB", expected/1e6)
	}
}

// denseEncode is the encoding as the plain N x n product of its definition,
// E[k, j] = T[5^j k mod 2N]: the reference for the NTT-based encodeTable.
func denseEncode(logN, logScale int, d []int64, q uint64) []uint64 {
	N := 1 << uint(logN)
	T := encodeBase(logN, logScale)
	out := make([]uint64, N)
	for k := 0; k < N; k++ {
		var acc uint64
		g := 1
		for _, v := range d {
			acc = addmod(acc, mulmod(signedMod(T[(g*k)%(2*N)], q), signedMod(v, q), q), q)
			g = g * 5 % (2 * N)
		}
		out[k] = acc
	}
	return out
}

func TestEncodeMatchesDenseProduct(t *testing.T) {
	rng := mrand.New(mrand.NewSource(7))
	for _, c := range []struct{ logN, logScale, n, primes int }{
		{4, 20, 8, 1}, {5, 20, 3, 2}, {7, 25, 64, 1}, {11, 25, 1024, 1}, {11, 25, 1000, 1},
		{13, 40, 869, 2}, {12, 40, 2048, 3},
	} {
		cfg := &Config{LogN: c.logN, Primes: testPrimes(t, c.logN, c.primes), Reps: 1, MsgBytes: 1,
			DataBits: 8, NMsgs: c.n, Points: 1, LogScale: c.logScale}
		d := make([]int64, c.n)
		for j := range d {
			d[j] = rng.Int63n(1<<16) - 1<<15
		}
		got, err := Encode(cfg, d)
		if err != nil {
			t.Fatal(err)
		}
		for l, q := range cfg.Primes {
			want := denseEncode(c.logN, c.logScale, d, q)
			for k := range want {
				if got[l][k] != want[k] {
					t.Fatalf("logN %d, n %d: coefficient %d (prime %d) is %d, dense product %d",
						c.logN, c.n, k, l, got[l][k], want[k])
				}
			}
		}
	}
}

// Messages carrying several data points (a signed batch): the circuit hashes the whole
// message (chained blocks) and converts every point at its byte offset.
func TestBatchedMessages(t *testing.T) {
	rng := mrand.New(mrand.NewSource(8))
	for _, c := range []struct{ bits, points, msgs int }{{8, 40, 1}, {8, 5, 3}, {16, 7, 2}, {32, 3, 2}} {
		nb := c.bits / 8
		cfg := &Config{LogN: 7, Primes: testPrimes(t, 7, 2), Reps: 4, MsgBytes: c.points*nb + 22,
			DataBits: c.bits, NMsgs: c.msgs, Points: c.points, LogScale: 20}
		st, w, _ := honestInstance(t, cfg, rng)
		checkEvaluation(t, cfg, st, w, fmt.Sprintf("%+v", c))
		proof, err := Prove(cfg, st, w, []byte("0123456789abcdef"), []byte("ctx"))
		if err != nil {
			t.Fatal(err)
		}
		if f, err := Verify(cfg, st, proof, []byte("ctx")); err != nil || f != 0 {
			t.Fatalf("%+v: honest batched proof rejected: fails=%d err=%v", c, f, err)
		}
		// a changed point inside a batch: the statement's ciphertext no longer matches
		w2 := &Witness{Msgs: append([][]byte(nil), w.Msgs...), Polys: w.Polys}
		m := append([]byte(nil), w.Msgs[c.msgs-1]...)
		m[(c.points-1)*nb] ^= 0x01
		w2.Msgs[c.msgs-1] = m
		p2, _ := Prove(cfg, st, w2, []byte("0123456789abcdef"), []byte("ctx"))
		if f, _ := Verify(cfg, st, p2, []byte("ctx")); f&FailDigest == 0 || f&FailEncryption == 0 {
			t.Fatalf("%+v: changed point accepted: fails=%d", c, f)
		}
	}
}

// A residue of player 2's opened input share at or above its prime is a malformed proof
// (one encoding per proof), found by the verifier's workers.
func TestNonCanonicalInputShareIsMalformed(t *testing.T) {
	rng := mrand.New(mrand.NewSource(9))
	cfg := &Config{LogN: 5, Primes: testPrimes(t, 5, 1), Reps: 6, MsgBytes: 24, DataBits: 16, NMsgs: 2, Points: 1, LogScale: 25}
	st, w, _ := honestInstance(t, cfg, rng)
	proof, err := Prove(cfg, st, w, []byte("0123456789abcdef"), []byte("c"))
	if err != nil {
		t.Fatal(err)
	}
	var ch [32]byte
	copy(ch[:], proof[len(magic)+4:])
	off := len(magic) + 4 + 32
	for _, e := range challengeTrits(ch, cfg.Reps) {
		off += 9*32 + 2*SeedBytes
		if e != 0 {
			bad := append([]byte(nil), proof...)
			res := off + cfg.NMsgs*cfg.MsgBytes // the first residue, bit-packed from bit 0
			for b := 0; b < bits.Len64(cfg.Primes[0]); b++ {
				bad[res+b/8] |= 1 << uint(b%8)
			}
			if _, err := Verify(cfg, st, bad, []byte("c")); err != ErrMalformed {
				t.Fatalf("non-canonical residue: err = %v", err)
			}
			return
		}
		off += 4 + int(binary.LittleEndian.Uint32(proof[off:]))
	}
	t.Skip("no repetition opened player 2")
}

// The spill round-trips its records, stores them encrypted and leaves no file behind.
func TestSpillRoundTripEncryptedUnlinked(t *testing.T) {
	sp, err := newSpill()
	if err != nil {
		t.Fatal(err)
	}
	defer sp.close()
	if _, err := os.Stat(sp.f.Name()); !os.IsNotExist(err) {
		t.Fatalf("the spill file is still linked: %v", err)
	}
	rng := mrand.New(mrand.NewSource(10))
	var recs []record
	var want [][]byte
	for _, n := range []int{1, 15, 16, 17, 1000, 4096} {
		b := bytes.Repeat([]byte{byte(n)}, n)
		want = append(want, append([]byte(nil), b...))
		r, err := sp.put(b)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
		raw := make([]byte, n)
		sp.f.ReadAt(raw, r.off)
		if n >= 16 && bytes.Equal(raw, want[len(want)-1]) {
			t.Fatalf("record of %d bytes stored in the clear", n)
		}
	}
	rng.Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i]; want[i], want[j] = want[j], want[i] })
	tmp := make([]byte, 4096)
	for i, r := range recs {
		got, err := sp.get(r, tmp)
		if err != nil || !bytes.Equal(got, want[i]) {
			t.Fatalf("record %d does not round-trip (%v)", i, err)
		}
	}
}

// Without a writable temporary directory the prover keeps the views in memory.
func TestProveWithoutTemporaryDirectory(t *testing.T) {
	t.Setenv("TMPDIR", "/nonexistent/secinfer-test")
	rng := mrand.New(mrand.NewSource(11))
	cfg := &Config{LogN: 5, Primes: testPrimes(t, 5, 1), Reps: 4, MsgBytes: 24, DataBits: 16, NMsgs: 2, Points: 1, LogScale: 25}
	st, w, _ := honestInstance(t, cfg, rng)
	sp, _ := newSpill()
	if sp.f != nil {
		t.Fatal("a temporary file was created under a missing TMPDIR")
	}
	proof, err := Prove(cfg, st, w, []byte("0123456789abcdef"), []byte("c"))
	if err != nil {
		t.Fatal(err)
	}
	if f, err := Verify(cfg, st, proof, []byte("c")); err != nil || f != 0 {
		t.Fatalf("in-memory proof rejected: fails=%d err=%v", f, err)
	}
}
