package zkbpp

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/tuneinsight/lattigo/v6/ring"
)

// Verification failures, one bit each (the verifier evaluates every check).
const (
	FailChallenge  = 1 // the Fiat-Shamir challenge is not the hash of this session's transcript
	FailView       = 2 // an opened view does not match its commitment or output shares
	FailDigest     = 4 // the Boolean outputs do not reconstruct the signed digests
	FailEncryption = 8 // the arithmetic outputs do not reconstruct the ciphertext and commitment
)

// Statement is the public input: the signed digests and the residues (one row per prime)
// of pk0, pk1, the BDOP matrix entries a1..a4, b1..b3, the ciphertext and the commitment.
type Statement struct {
	Digests [][32]byte
	Public  [NumPublicPolys][][]uint64
	Output  [NumOutputPolys][][]uint64
}

// Witness is the prover's secret: the messages and u, e0, e1, r0..r4 (centred integers).
type Witness struct {
	Msgs  [][]byte
	Polys [NumSecretPolys][]int64
}

func digestWords(d [32]byte) [8]uint32 {
	var w [8]uint32
	for i := range w {
		w[i] = binary.BigEndian.Uint32(d[4*i:])
	}
	return w
}

func (st *Statement) prepare(cfg *Config) (*publicData, error) {
	if len(st.Digests) != cfg.NMsgs {
		return nil, fmt.Errorf("need %d digests, got %d", cfg.NMsgs, len(st.Digests))
	}
	for _, set := range [][][][]uint64{st.Public[:], st.Output[:]} {
		for _, rows := range set {
			if len(rows) != len(cfg.Primes) {
				return nil, fmt.Errorf("polynomials need %d rows", len(cfg.Primes))
			}
			for l, row := range rows {
				if len(row) != cfg.N() {
					return nil, fmt.Errorf("polynomial rows need %d coefficients", cfg.N())
				}
				for _, v := range row {
					if v >= cfg.Primes[l] {
						return nil, errors.New("polynomial coefficient not reduced")
					}
				}
			}
		}
	}
	dw := make([][8]uint32, len(st.Digests))
	for i, d := range st.Digests {
		dw[i] = digestWords(d)
	}
	return newPublic(cfg, st.Public, dw, st.Output)
}

// ---------------------------------------------------------------- input shares

// The secret polynomials are shared in the NTT domain (evaluations at the roots of X^N + 1
// modulo each prime): the seeded shares are uniform there as well, the witness is
// transformed once per proof, and the circuit's products with public polynomials are
// then pointwise -- no transform per player and repetition except for c0 (see evaluate).

// witnessNTT returns the witness polynomials in the NTT domain (once per proof).
func witnessNTT(pd *publicData, w *Witness) (*[NumSecretPolys]ring.Poly, error) {
	cfg := pd.cfg
	var out [NumSecretPolys]ring.Poly
	for k := range out {
		if len(w.Polys[k]) != cfg.N() {
			return nil, fmt.Errorf("secret polynomial %d needs %d coefficients", k, cfg.N())
		}
		p := pd.rq.NewPoly()
		for l, q := range cfg.Primes {
			for j, v := range w.Polys[k] {
				p.Coeffs[l][j] = signedMod(v, q)
			}
		}
		pd.rq.NTT(p, p)
		out[k] = p
	}
	return &out, nil
}

func seededInputs(pd *publicData, seed []byte) *inputs {
	cfg := pd.cfg
	t := newTape(seed, "input-bool")
	in := &inputs{words: make([]uint32, cfg.NMsgs*pd.nw)}
	for i := range in.words {
		in.words[i] = t.u32() & pd.mask[i%pd.nw]
	}
	ta := newTape(seed, "input-arith")
	for k := range in.polys {
		p := pd.rq.NewPoly()
		for l, q := range cfg.Primes {
			for j := range p.Coeffs[l] {
				p.Coeffs[l][j] = ta.modq(q)
			}
		}
		in.polys[k] = p
	}
	return in
}

// lastShare returns player 2's input share: the witness minus the seeded shares (wN: the
// witness polynomials in the NTT domain, witnessNTT).
func lastShare(pd *publicData, w *Witness, wN *[NumSecretPolys]ring.Poly, s0, s1 *inputs) (*inputs, error) {
	cfg := pd.cfg
	if len(w.Msgs) != cfg.NMsgs {
		return nil, fmt.Errorf("need %d messages, got %d", cfg.NMsgs, len(w.Msgs))
	}
	in := &inputs{words: make([]uint32, cfg.NMsgs*pd.nw)}
	for i, m := range w.Msgs {
		if len(m) != cfg.MsgBytes {
			return nil, fmt.Errorf("message %d has %d bytes, not %d", i, len(m), cfg.MsgBytes)
		}
		buf := make([]byte, 4*pd.nw)
		copy(buf, m)
		for t := 0; t < pd.nw; t++ {
			k := i*pd.nw + t
			in.words[k] = binary.BigEndian.Uint32(buf[4*t:]) ^ s0.words[k] ^ s1.words[k]
		}
	}
	for k := range in.polys {
		p := pd.rq.NewPoly()
		for l, q := range cfg.Primes {
			for j, v := range wN[k].Coeffs[l] {
				p.Coeffs[l][j] = submod(submod(v, s0.polys[k].Coeffs[l][j], q), s1.polys[k].Coeffs[l][j], q)
			}
		}
		in.polys[k] = p
	}
	return in, nil
}

// ---------------------------------------------------------------- hashing

type hw struct{ hash.Hash }

func newHash(label string) hw {
	h := hw{sha256.New()}
	h.Write([]byte("secinfer/zkbpp/" + label + "/v1\x00"))
	return h
}

func (h hw) u32s(v []uint32) {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], x)
	}
	h.Write(b)
}

func (h hw) u64s(v []uint64) {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], x)
	}
	h.Write(b)
}

func (h hw) poly(p ring.Poly) {
	for _, row := range p.Coeffs {
		h.u64s(row)
	}
}

func (h hw) sum() (d [32]byte) { copy(d[:], h.Sum(nil)); return }

// commitPacked is the commitment to a player's view: H(seed, player 2's input share,
// view), over the same packed bytes the proof carries (in2 nil for players 0 and 1).
func commitPacked(seed, in2, viewBytes []byte) [32]byte {
	h := newHash("commit")
	h.Write(seed)
	h.Write(in2)
	h.Write(viewBytes)
	return h.sum()
}

// packInputs encodes player 2's input share: each message's bytes (the words hold message
// bits only), then every secret polynomial's residues at ceil(log2 q) bits each.
func packInputs(pd *publicData, in *inputs) []byte {
	cfg := pd.cfg
	out := make([]byte, 0, inputBytes(pd))
	buf := make([]byte, 4*pd.nw)
	for i := 0; i < cfg.NMsgs; i++ {
		for t := 0; t < pd.nw; t++ {
			binary.BigEndian.PutUint32(buf[4*t:], in.words[i*pd.nw+t])
		}
		out = append(out, buf[:cfg.MsgBytes]...)
	}
	var bb bitbuf
	for _, p := range in.polys {
		for l, q := range cfg.Primes {
			w := bits.Len64(q)
			for _, v := range p.Coeffs[l] {
				bb.put(v, w)
			}
		}
	}
	return append(out, bb.bytes()...)
}

// inputBytes is the size of packInputs' encoding.
func inputBytes(pd *publicData) int {
	cfg := pd.cfg
	nbits := 0
	for _, q := range cfg.Primes {
		nbits += bits.Len64(q) * cfg.N()
	}
	return cfg.NMsgs*cfg.MsgBytes + (NumSecretPolys*nbits+7)/8
}

// unpackInputs decodes packInputs' encoding; false for a non-canonical one.
func unpackInputs(pd *publicData, b []byte) (*inputs, bool) {
	cfg := pd.cfg
	if len(b) != inputBytes(pd) {
		return nil, false
	}
	in := &inputs{words: make([]uint32, cfg.NMsgs*pd.nw)}
	buf := make([]byte, 4*pd.nw)
	for i := 0; i < cfg.NMsgs; i++ {
		for j := range buf {
			buf[j] = 0
		}
		copy(buf, b[i*cfg.MsgBytes:(i+1)*cfg.MsgBytes])
		for t := 0; t < pd.nw; t++ {
			in.words[i*pd.nw+t] = binary.BigEndian.Uint32(buf[4*t:])
		}
	}
	rd := &bitreader{b: b[cfg.NMsgs*cfg.MsgBytes:]}
	for k := range in.polys {
		p := pd.rq.NewPoly()
		for l, q := range cfg.Primes {
			w := bits.Len64(q)
			for j := range p.Coeffs[l] {
				v := rd.get(w)
				if v >= q {
					return nil, false
				}
				p.Coeffs[l][j] = v
			}
		}
		in.polys[k] = p
	}
	return in, rd.exhausted()
}

func hashOutB(words []uint32) [32]byte {
	h := newHash("out-bool")
	h.u32s(words)
	return h.sum()
}

func hashOutA(polys [NumOutputPolys]ring.Poly) [32]byte {
	h := newHash("out-arith")
	for _, p := range polys {
		h.poly(p)
	}
	return h.sum()
}

func statementHash(cfg *Config, st *Statement) [32]byte {
	h := newHash("statement")
	h.u64s([]uint64{uint64(cfg.LogN), uint64(cfg.Reps), uint64(cfg.MsgBytes), uint64(cfg.DataBits),
		uint64(cfg.NMsgs), uint64(cfg.Points), uint64(cfg.LogScale), uint64(len(cfg.Primes))})
	h.u64s(cfg.Primes)
	for _, d := range st.Digests {
		h.Write(d[:])
	}
	for _, set := range [][][][]uint64{st.Public[:], st.Output[:]} {
		for _, rows := range set {
			for _, row := range rows {
				h.u64s(row)
			}
		}
	}
	return h.sum()
}

type repTranscript struct {
	com, hB, hA [3][32]byte
}

func challengeHash(stmt [32]byte, ctx []byte, reps []repTranscript) [32]byte {
	h := newHash("challenge")
	h.Write(stmt[:])
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(ctx)))
	h.Write(n[:])
	h.Write(ctx)
	for _, t := range reps {
		for p := 0; p < 3; p++ {
			h.Write(t.com[p][:])
			h.Write(t.hB[p][:])
			h.Write(t.hA[p][:])
		}
	}
	return h.sum()
}

// challengeTrits expands the challenge hash into one e in {0,1,2} per repetition.
func challengeTrits(ch [32]byte, reps int) []int {
	out := make([]int, 0, reps)
	for ctr := uint64(0); len(out) < reps; ctr++ {
		h := sha256.New()
		h.Write(ch[:])
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], ctr)
		h.Write(b[:])
		for _, x := range h.Sum(nil) {
			for s := 0; s < 8 && len(out) < reps; s += 2 {
				if t := int(x>>uint(s)) & 3; t < 3 {
					out = append(out, t)
				}
			}
		}
	}
	return out
}

// ---------------------------------------------------------------- sizes

type sizes struct{ nIn, nOutB int }

func sizesOf(pd *publicData) sizes {
	return sizes{nIn: pd.cfg.NMsgs * pd.nw, nOutB: 8 * pd.cfg.NMsgs}
}

// ---------------------------------------------------------------- parallel repetitions

func parallel(n int, f func(i int)) {
	workers := runtime.GOMAXPROCS(0)
	if workers > n {
		workers = n
	}
	var wg sync.WaitGroup
	next := make(chan int, n)
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				f(i)
			}
		}()
	}
	wg.Wait()
}

var magic = []byte("ZKBPP2")

// ---------------------------------------------------------------- prover

// proverRep is what the prover keeps of a repetition until the challenge is known: the
// seeds, the transcript, and where player 2's packed input share and the three packed
// views (any two may be opened) were spilled. Nothing else (input shares, output
// polynomials, unpacked buffers) outlives the repetition.
type proverRep struct {
	seeds [3][]byte
	in2   record    // packInputs of player 2's share
	views [3]record // packed gate outputs
	t     repTranscript
}

// Prove makes a ZKB++ proof that the witness satisfies the statement, bound to ctx
// (the verifier's session context: a reused proof fails in another session).
func Prove(cfg *Config, st *Statement, w *Witness, master []byte, ctx []byte) ([]byte, error) {
	return ProveTo(cfg, st, w, master, ctx, func(n int) []byte { return make([]byte, n) })
}

// ProveTo is Prove writing the proof into alloc(len), a buffer of the proof's exact length
// (e.g. C memory handed to the caller: no further copy of the proof). The prover's own
// memory stays at a few repetitions' worth (see spill) besides that buffer.
func ProveTo(cfg *Config, st *Statement, w *Witness, master []byte, ctx []byte, alloc func(int) []byte) ([]byte, error) {
	if len(master) < 16 {
		return nil, errors.New("the prover's master seed needs at least 16 bytes")
	}
	pd, err := st.prepare(cfg)
	if err != nil {
		return nil, err
	}
	wN, err := witnessNTT(pd, w)
	if err != nil {
		return nil, err
	}
	sp, err := newSpill()
	if err != nil {
		return nil, err
	}
	defer sp.close()
	reps := make([]*proverRep, cfg.Reps)
	errs := make([]error, cfg.Reps)
	var viewWords atomic.Int64 // a finished repetition's view size: the next ones' capacity
	parallel(cfg.Reps, func(j int) {
		rq := pd.rq // stateless (precomputed tables only): shared by the workers
		pr := &proverRep{}
		r := &run{primes: cfg.Primes}
		var in [3]*inputs
		for p := 0; p < 3; p++ {
			pr.seeds[p] = deriveSeed(master, j, p)
			r.andTape[p] = newTape(pr.seeds[p], "and")
			r.mulTape[p] = newTape(pr.seeds[p], "mul")
			r.views[p] = &view{out: withCapacity(int(viewWords.Load()))}
		}
		in[0], in[1] = seededInputs(pd, pr.seeds[0]), seededInputs(pd, pr.seeds[1])
		in[2], errs[j] = lastShare(pd, w, wN, in[0], in[1])
		if errs[j] != nil {
			return
		}
		in2 := packInputs(pd, in[2])
		out := r.evaluate(pd, rq, in, [3]bool{true, true, true})
		viewWords.Store(int64(len(r.views[0].out.w)))
		for p := 0; p < 3; p++ {
			vb := r.views[p].out.bytes()
			r.views[p] = nil
			var i2 []byte
			if p == 2 {
				i2 = in2
			}
			pr.t.com[p] = commitPacked(pr.seeds[p], i2, vb)
			pr.t.hB[p] = hashOutB(out[p].words)
			pr.t.hA[p] = hashOutA(out[p].polys)
			if pr.views[p], errs[j] = sp.put(vb); errs[j] != nil {
				return
			}
		}
		if pr.in2, errs[j] = sp.put(in2); errs[j] != nil {
			return
		}
		reps[j] = pr
	})
	for _, e := range errs {
		if e != nil {
			return nil, e
		}
	}
	ts := make([]repTranscript, cfg.Reps)
	for j, pr := range reps {
		ts[j] = pr.t
	}
	ch := challengeHash(statementHash(cfg, st), ctx, ts)
	es := challengeTrits(ch, cfg.Reps)
	size, most := len(magic)+4+32, 0
	for j, pr := range reps {
		e, e1 := es[j], (es[j]+1)%3
		size += 9*32 + 2*SeedBytes + 4 + pr.views[e1].n
		most = max(most, pr.views[e1].n, pr.in2.n)
		if e == 2 || e1 == 2 {
			size += pr.in2.n
		}
	}
	tmp := make([]byte, most)
	buf := alloc(size)[:0]
	buf = append(buf, magic...)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(cfg.Reps))
	buf = append(buf, ch[:]...)
	for j, pr := range reps {
		e, e1 := es[j], (es[j]+1)%3
		for p := 0; p < 3; p++ {
			buf = append(buf, pr.t.com[p][:]...)
			buf = append(buf, pr.t.hB[p][:]...)
			buf = append(buf, pr.t.hA[p][:]...)
		}
		buf = append(buf, pr.seeds[e]...)
		buf = append(buf, pr.seeds[e1]...)
		if e == 2 || e1 == 2 {
			b, err := sp.get(pr.in2, tmp)
			if err != nil {
				return nil, err
			}
			buf = append(buf, b...)
		}
		vb, err := sp.get(pr.views[e1], tmp)
		if err != nil {
			return nil, err
		}
		buf = binary.LittleEndian.AppendUint32(buf, uint32(len(vb)))
		buf = append(buf, vb...)
	}
	if len(buf) != size {
		return nil, fmt.Errorf("internal: proof of %d bytes, layout says %d", len(buf), size)
	}
	return buf, nil
}
