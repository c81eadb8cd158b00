package main

/*
#include <stdint.h>
#include <stdlib.h>
*/
import "C"

import (
	"math"
	"runtime/debug"
	"unsafe"

	"github.com/tuneinsight/lattigo/v6/core/rlwe"
	"github.com/tuneinsight/lattigo/v6/schemes/ckks"

	"secinfer/native/zkbpp"
)

// Thin exports of the ZKB++ prover/verifier (package zkbpp) for
// secinfer.crypto.zk.zkbpp. cfg = [logN, reps, msgBytes, dataBits, nMsgs, logScale, L,
// points per message];
// primes has L entries; polynomial arrays are row-major (poly, prime, coefficient).

// zkFailMalformed is added to the failure bits when the proof does not parse.
const zkFailMalformed = 16

func zkConfig(cfg *C.int64_t, primes *C.uint64_t) *zkbpp.Config {
	v := i64s(cfg, 8)
	if v[6] < 1 || v[6] > 8 {
		fail(codeArgument, "need 1..8 primes")
	}
	c := &zkbpp.Config{LogN: int(v[0]), Reps: int(v[1]), MsgBytes: int(v[2]), DataBits: int(v[3]),
		NMsgs: int(v[4]), LogScale: int(v[5]), Points: int(v[7]), Primes: append([]uint64(nil), u64s(primes, int(v[6]))...)}
	if err := c.Validate(); err != nil {
		fail(codeArgument, "zkbpp: %v", err)
	}
	return c
}

func zkPolys(p *C.uint64_t, count int, c *zkbpp.Config) [][][]uint64 {
	L, N := len(c.Primes), c.N()
	flat := u64s(p, count*L*N)
	out := make([][][]uint64, count)
	for k := range out {
		out[k] = make([][]uint64, L)
		for l := range out[k] {
			out[k][l] = append([]uint64(nil), flat[(k*L+l)*N:(k*L+l+1)*N]...)
		}
	}
	return out
}

func zkStatement(c *zkbpp.Config, digests *C.uchar, pub, out *C.uint64_t) *zkbpp.Statement {
	st := &zkbpp.Statement{}
	raw := inBytes(digests, C.size_t(32*c.NMsgs))
	st.Digests = make([][32]byte, c.NMsgs)
	for i := range st.Digests {
		copy(st.Digests[i][:], raw[32*i:])
	}
	copy(st.Public[:], zkPolys(pub, zkbpp.NumPublicPolys, c))
	if out != nil {
		copy(st.Output[:], zkPolys(out, zkbpp.NumOutputPolys, c))
	} else {
		for k := range st.Output {
			st.Output[k] = make([][]uint64, len(c.Primes))
			for l := range st.Output[k] {
				st.Output[k][l] = make([]uint64, c.N())
			}
		}
	}
	return st
}

func zkWitness(c *zkbpp.Config, msgs *C.uchar, wit *C.int64_t) *zkbpp.Witness {
	w := &zkbpp.Witness{}
	raw := inBytes(msgs, C.size_t(c.NMsgs*c.MsgBytes))
	for i := 0; i < c.NMsgs; i++ {
		w.Msgs = append(w.Msgs, append([]byte(nil), raw[i*c.MsgBytes:(i+1)*c.MsgBytes]...))
	}
	flat := i64s(wit, zkbpp.NumSecretPolys*c.N())
	for k := range w.Polys {
		w.Polys[k] = append([]int64(nil), flat[k*c.N():(k+1)*c.N()]...)
	}
	return w
}

//export zk_prove
func zk_prove(cfg *C.int64_t, primes *C.uint64_t, digests *C.uchar, pub, out *C.uint64_t, msgs *C.uchar, wit *C.int64_t, seed *C.uchar, seedlen C.size_t, ctx *C.uchar, ctxlen C.size_t, proof **C.uchar, prooflen *C.size_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	c := zkConfig(cfg, primes)
	st := zkStatement(c, digests, pub, out)
	// the proof is written straight into C memory of its exact length (the caller frees it):
	// no Go-side copy of a proof of hundreds of MB
	var cbuf unsafe.Pointer
	alloc := func(n int) []byte {
		cbuf = C.malloc(C.size_t(n + 1))
		if cbuf == nil {
			fail(codeInternal, "out of memory")
		}
		return unsafe.Slice((*byte)(cbuf), n)
	}
	p, err := zkbpp.ProveTo(c, st, zkWitness(c, msgs, wit), append([]byte(nil), inBytes(seed, seedlen)...), append([]byte(nil), inBytes(ctx, ctxlen)...), alloc)
	if err != nil && cbuf != nil {
		C.free(cbuf)
	}
	check(err, codeArgument, "zkbpp prove")
	*proof = (*C.uchar)(cbuf)
	*prooflen = C.size_t(len(p))
	debug.FreeOSMemory() // the repetitions' views are garbage now: hand the pages back
	return codeOK
}

//export zk_verify
func zk_verify(cfg *C.int64_t, primes *C.uint64_t, digests *C.uchar, pub, out *C.uint64_t, proof *C.uchar, prooflen C.size_t, ctx *C.uchar, ctxlen C.size_t, fails *C.int, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	c := zkConfig(cfg, primes)
	st := zkStatement(c, digests, pub, out)
	// the caller's proof is read in place (not copied; Verify keeps no reference past return)
	var pb []byte
	if prooflen > 0 && proof != nil {
		pb = unsafe.Slice((*byte)(unsafe.Pointer(proof)), int(prooflen))
	}
	f, err := zkbpp.Verify(c, st, pb, append([]byte(nil), inBytes(ctx, ctxlen)...))
	debug.FreeOSMemory()
	if err == zkbpp.ErrMalformed {
		f = zkbpp.FailChallenge | zkbpp.FailView | zkbpp.FailDigest | zkbpp.FailEncryption | zkFailMalformed
	} else {
		check(err, codeArgument, "zkbpp verify")
	}
	*fails = C.int(f)
	return codeOK
}

// zk_evaluate runs the circuit in the clear: digests (32 * nMsgs bytes) and the six
// output polynomials.
//
//export zk_evaluate
func zk_evaluate(cfg *C.int64_t, primes *C.uint64_t, pub *C.uint64_t, msgs *C.uchar, wit *C.int64_t, digOut *C.uchar, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	c := zkConfig(cfg, primes)
	zeros := make([]byte, 32*c.NMsgs+1)
	st := zkStatement(c, (*C.uchar)(&zeros[0]), pub, nil)
	digs, polys, err := zkbpp.Evaluate(c, st, zkWitness(c, msgs, wit), []byte("secinfer/zk-evaluate/seed"))
	check(err, codeArgument, "zkbpp evaluate")
	db := unsafe.Slice((*byte)(unsafe.Pointer(digOut)), 32*c.NMsgs)
	for i, d := range digs {
		copy(db[32*i:], d[:])
	}
	L, N := len(c.Primes), c.N()
	dst := u64s(out, zkbpp.NumOutputPolys*L*N)
	for k := range polys {
		for l := range polys[k] {
			copy(dst[(k*L+l)*N:], polys[k][l])
		}
	}
	return codeOK
}

// zk_encode writes the residues of the exact CKKS encoding m = E d (zkbpp.Encode).
//
//export zk_encode
func zk_encode(cfg *C.int64_t, primes *C.uint64_t, d *C.int64_t, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	c := zkConfig(cfg, primes)
	res, err := zkbpp.Encode(c, i64s(d, c.NPoints()))
	check(err, codeArgument, "zkbpp encode")
	dst := u64s(out, len(c.Primes)*c.N())
	for l := range res {
		copy(dst[l*c.N():], res[l])
	}
	return codeOK
}

// zk_plaintext makes a CKKS plaintext (slot-encoded, scale 2^logScale) at `level` from
// coefficient-domain residues (level+1 rows of N), e.g. the output of zk_encode.
//
//export zk_plaintext
func zk_plaintext(ph C.uint64_t, level, logScale C.int, res *C.uint64_t, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	if int(level) < 0 || int(level) > P.MaxLevel() {
		fail(codeArgument, "level %d out of range", level)
	}
	N := P.N()
	src := u64s(res, (int(level)+1)*N)
	pt := ckks.NewPlaintext(P, int(level))
	r := P.RingQ().AtLevel(int(level))
	for l := 0; l <= int(level); l++ {
		q := P.Q()[l]
		for j := 0; j < N; j++ {
			if src[l*N+j] >= q {
				fail(codeArgument, "residue (%d, %d) not reduced", l, j)
			}
		}
		copy(pt.Value.Coeffs[l], src[l*N:(l+1)*N])
	}
	if pt.IsNTT {
		r.NTT(pt.Value, pt.Value)
	}
	pt.Scale = rlwe.NewScale(math.Ldexp(1, int(logScale)))
	*out = C.uint64_t(put(&PT{ph: uint64(ph), v: pt}))
	return codeOK
}

// zk_lincomb writes sum_i a_i x_i in R_Q: a (count, L, N) residues, x (count, N) int64.
//
//export zk_lincomb
func zk_lincomb(logN C.int, primes *C.uint64_t, L C.int, count C.int, a *C.uint64_t, x *C.int64_t, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	if logN < 3 || logN > 16 || L < 1 || L > 8 || count < 1 || count > 64 {
		fail(codeArgument, "zk_lincomb: bad sizes")
	}
	N, nl, k := 1<<uint(logN), int(L), int(count)
	ps := append([]uint64(nil), u64s(primes, nl)...)
	flatA, flatX := u64s(a, k*nl*N), i64s(x, k*N)
	as := make([][][]uint64, k)
	xs := make([][]int64, k)
	for i := 0; i < k; i++ {
		as[i] = make([][]uint64, nl)
		for l := 0; l < nl; l++ {
			as[i][l] = flatA[(i*nl+l)*N : (i*nl+l+1)*N]
		}
		xs[i] = flatX[i*N : (i+1)*N]
	}
	res, err := zkbpp.LinComb(int(logN), ps, as, xs)
	check(err, codeArgument, "zk_lincomb")
	dst := u64s(out, nl*N)
	for l := range res {
		copy(dst[l*N:], res[l])
	}
	return codeOK
}
