package zkbpp

import (
	"bytes"
	"encoding/binary"
	"errors"

	"github.com/tuneinsight/lattigo/v6/ring"
)

// ErrMalformed is returned for a proof whose layout does not match the configuration.
var ErrMalformed = errors.New("malformed ZKB++ proof")

type reader struct {
	b   []byte
	bad bool
}

func (r *reader) take(n int) []byte {
	if r.bad || n < 0 || n > len(r.b) {
		r.bad = true
		if n < 0 || n > 64 {
			return nil
		}
		return make([]byte, n)
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

type verifierRep struct {
	t      repTranscript
	seedE  []byte
	seedE1 []byte
	in2    []byte // player 2's packed input share (unpacked by the worker)
	viewE1 []byte // player e+1's packed gate outputs
	e      int
}

// Verify checks a proof against the statement and the session context; it returns the
// Fail* bits of every check that failed (0: the proof verifies), or ErrMalformed.
func Verify(cfg *Config, st *Statement, proof []byte, ctx []byte) (int, error) {
	pd, err := st.prepare(cfg)
	if err != nil {
		return 0, err
	}
	sz := sizesOf(pd)
	rd := &reader{b: proof}
	if !bytes.Equal(rd.take(len(magic)), magic) {
		return 0, ErrMalformed
	}
	if n := binary.LittleEndian.Uint32(rd.take(4)); int(n) != cfg.Reps {
		return 0, ErrMalformed
	}
	var ch [32]byte
	copy(ch[:], rd.take(32))
	es := challengeTrits(ch, cfg.Reps)
	reps := make([]*verifierRep, cfg.Reps)
	for j := range reps {
		vr := &verifierRep{e: es[j]}
		for p := 0; p < 3; p++ {
			copy(vr.t.com[p][:], rd.take(32))
			copy(vr.t.hB[p][:], rd.take(32))
			copy(vr.t.hA[p][:], rd.take(32))
		}
		vr.seedE = append([]byte(nil), rd.take(SeedBytes)...)
		vr.seedE1 = append([]byte(nil), rd.take(SeedBytes)...)
		if vr.e != 0 { // player 2 is e (e = 2) or e+1 (e = 1)
			vr.in2 = rd.take(inputBytes(pd))
		}
		n := binary.LittleEndian.Uint32(rd.take(4))
		vr.viewE1 = rd.take(int(n))
		if rd.bad {
			return 0, ErrMalformed
		}
		reps[j] = vr
	}
	if len(rd.b) != 0 {
		return 0, ErrMalformed
	}
	malformed := make([]bool, cfg.Reps)
	viewBad := make([]bool, cfg.Reps)
	digestBad := make([]bool, cfg.Reps)
	encBad := make([]bool, cfg.Reps)
	parallel(cfg.Reps, func(j int) {
		vr := reps[j]
		rq := pd.rq // stateless (precomputed tables only): shared by the workers
		e, e1, e2 := vr.e, (vr.e+1)%3, (vr.e+2)%3
		r := &run{verify: true, e: e, primes: cfg.Primes}
		seeds := map[int][]byte{e: vr.seedE, e1: vr.seedE1}
		var in [3]*inputs
		for _, p := range []int{e, e1} {
			r.andTape[p] = newTape(seeds[p], "and")
			r.mulTape[p] = newTape(seeds[p], "mul")
			if p == 2 {
				var ok bool
				if in[p], ok = unpackInputs(pd, vr.in2); !ok {
					malformed[j] = true // non-canonical residues in player 2's share
					return
				}
			} else {
				in[p] = seededInputs(pd, seeds[p])
			}
		}
		in[e2] = &inputs{words: make([]uint32, sz.nIn)}
		for k := range in[e2].polys {
			in[e2].polys[k] = rq.NewPoly()
		}
		r.views[e] = &view{}
		r.rd = &bitreader{b: vr.viewE1}
		var live [3]bool
		live[e], live[e1] = true, true
		out := r.evaluate(pd, rq, in, live)
		bad := !r.rd.exhausted()
		vb := map[int][]byte{e: r.views[e].out.bytes(), e1: vr.viewE1}
		for _, p := range []int{e, e1} {
			var i2 []byte
			if p == 2 {
				i2 = vr.in2
			}
			if commitPacked(seeds[p], i2, vb[p]) != vr.t.com[p] ||
				hashOutB(out[p].words) != vr.t.hB[p] || hashOutA(out[p].polys) != vr.t.hA[p] {
				bad = true
			}
		}
		viewBad[j] = bad
		// Player e+2's output share = public output - the opened players' shares; its hash
		// must be the committed one [ZKB++ Sec. 3].
		y2 := make([]uint32, sz.nOutB)
		for i := range y2 {
			y2[i] = pd.target[i/8][i%8] ^ out[e].words[i] ^ out[e1].words[i]
		}
		digestBad[j] = hashOutB(y2) != vr.t.hB[e2]
		var ya [NumOutputPolys]ring.Poly
		for k := range ya {
			ya[k] = rq.NewPoly()
			rq.Sub(pd.outA[k], out[e].polys[k], ya[k])
			rq.Sub(ya[k], out[e1].polys[k], ya[k])
		}
		encBad[j] = hashOutA(ya) != vr.t.hA[e2]
	})
	for _, m := range malformed {
		if m {
			return 0, ErrMalformed
		}
	}
	fails := 0
	for j := range reps {
		if viewBad[j] {
			fails |= FailView
		}
		if digestBad[j] {
			fails |= FailDigest
		}
		if encBad[j] {
			fails |= FailEncryption
		}
	}
	ts := make([]repTranscript, cfg.Reps)
	for j, vr := range reps {
		ts[j] = vr.t
	}
	if challengeHash(statementHash(cfg, st), ctx, ts) != ch {
		fails |= FailChallenge
	}
	return fails, nil
}

// Evaluate runs the circuit once in the clear (one simulated repetition, shares
// recombined): the digests and output polynomials the witness produces. For tests of the
// circuit against independent implementations (hashlib, the HE core's encryption).
func Evaluate(cfg *Config, st *Statement, w *Witness, seed []byte) ([][32]byte, [NumOutputPolys][][]uint64, error) {
	var outA [NumOutputPolys][][]uint64
	pd, err := st.prepare(cfg)
	if err != nil {
		return nil, outA, err
	}
	r := &run{primes: cfg.Primes}
	var in [3]*inputs
	for p := 0; p < 3; p++ {
		s := deriveSeed(seed, 0, p)
		r.andTape[p], r.mulTape[p], r.views[p] = newTape(s, "and"), newTape(s, "mul"), &view{}
		if p < 2 {
			in[p] = seededInputs(pd, s)
		}
	}
	wN, err := witnessNTT(pd, w)
	if err != nil {
		return nil, outA, err
	}
	if in[2], err = lastShare(pd, w, wN, in[0], in[1]); err != nil {
		return nil, outA, err
	}
	out := r.evaluate(pd, pd.rq, in, [3]bool{true, true, true})
	digs := make([][32]byte, cfg.NMsgs)
	for i := range digs {
		for k := 0; k < 8; k++ {
			v := out[0].words[8*i+k] ^ out[1].words[8*i+k] ^ out[2].words[8*i+k]
			v += outputOffset(pd.blocks)[k]
			binary.BigEndian.PutUint32(digs[i][4*k:], v)
		}
	}
	rq := pd.rq
	for k := range outA {
		s := rq.NewPoly()
		rq.Add(out[0].polys[k], out[1].polys[k], s)
		rq.Add(s, out[2].polys[k], s)
		if outputNTT(k) {
			rq.INTT(s, s)
		}
		outA[k] = s.Coeffs
	}
	return digs, outA, nil
}
