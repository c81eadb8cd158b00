package main

// Thin cgo exports over the fastpack sub-package (LWE -> RLWE tree packing and partial
// trace extraction for SAFHIRE). The batches live in caller-owned numpy arrays; nothing
// here keeps a pointer to them after returning.  [SAFHIRE Sec. 4.3-4.4]

/*
#include <stdint.h>
#include <stdlib.h>
*/
import "C"

import (
	"math"

	"github.com/tuneinsight/lattigo/v6/core/rlwe"
	"github.com/tuneinsight/lattigo/v6/utils"

	"secinfer/he/fastpack"
)

// evkParams: the evaluation-key layout of a parameter set (base-2^w gadget digits for the
// sets without a special prime).
func evkParams(ph C.uint64_t) []rlwe.EvaluationKeyParameters {
	if b := params(ph).base2; b > 0 {
		return []rlwe.EvaluationKeyParameters{{BaseTwoDecomposition: utils.Pointy(b)}}
	}
	return nil
}

func fpDepth(depth C.int) int {
	if depth < 0 || int(depth) > fastpack.MaxDepth {
		fail(codeArgument, "extraction depth %d out of [0, %d]", depth, fastpack.MaxDepth)
	}
	return int(depth)
}

// he_fp_elements writes the Galois elements of packing at `depth` (kind 0) or the
// client-side automorphisms D_depth (kind 1).
//
//export he_fp_elements
func he_fp_elements(ph C.uint64_t, depth C.int, kind C.int, out *C.uint64_t, n C.int, written *C.int, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	d := fpDepth(depth)
	var els []uint64
	if kind == 0 {
		els = fastpack.PackGaloisElements(P.Parameters, d)
	} else {
		els = fastpack.PreTraceElements(P.Parameters, d)
	}
	if len(els) > int(n) {
		fail(codeArgument, "output buffer too small")
	}
	copy(u64s(out, int(n)), els)
	*written = C.int(len(els))
	return codeOK
}

// he_fp_extract: cts holds nchunks * 2^depth ciphertext handles (chunk-major, in the order
// of D_depth); member t is coefficient index[t] of chunk chunk[t]. Writes b (count, L, G)
// and a (count, L, N), L = level + 1 (every ciphertext must be at `level`).
//
//export he_fp_extract
func he_fp_extract(ph C.uint64_t, depth C.int, level C.int, cts *C.uint64_t, nchunks C.int, chunk *C.int64_t, index *C.int64_t, count C.int, bout *C.uint64_t, aout *C.uint64_t, threads C.int, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	d := fpDepth(depth)
	G, N, L := 1<<d, P.N(), int(level)+1
	if nchunks < 1 || count < 0 {
		fail(codeArgument, "need at least one chunk and a non-negative count")
	}
	handles := u64s(cts, int(nchunks)*G)
	srcs := make([]fastpack.ExtractSource, nchunks)
	for c := range srcs {
		for u := 0; u < G; u++ {
			ct := getCT(ph, C.uint64_t(handles[c*G+u]))
			if ct.v.Degree() != 1 {
				fail(codeArgument, "extraction needs degree-1 ciphertexts")
			}
			if ct.v.Level() != int(level) {
				fail(codeArgument, "chunk %d ciphertext %d is at level %d, not %d", c, u, ct.v.Level(), level)
			}
			r := P.RingQ().AtLevel(int(level))
			c0, c1 := *ct.v.Value[0].CopyNew(), *ct.v.Value[1].CopyNew()
			if ct.v.IsNTT {
				r.INTT(c0, c0)
				r.INTT(c1, c1)
			}
			srcs[c].C0 = append(srcs[c].C0, c0.Coeffs[:L])
			srcs[c].C1 = append(srcs[c].C1, c1.Coeffs[:L])
		}
	}
	ch, ix := make([]int, count), make([]int, count)
	for t, v := range i64s(chunk, int(count)) {
		ch[t] = int(v)
	}
	for t, v := range i64s(index, int(count)) {
		ix[t] = int(v)
	}
	b := &fastpack.Batch{N: N, Level: int(level), Depth: d, Count: int(count),
		B: u64s(bout, int(count)*L*G), A: u64s(aout, int(count)*L*N)}
	check(fastpack.Extract(P.Parameters, srcs, ch, ix, b, int(threads)), codeArgument, "extract")
	return codeOK
}

// he_fp_pack packs member t of the batch (b: (count, L, G), a: (count, L, N)) into
// coefficient pos[t]; ks receives the number of key switches made.
//
//export he_fp_pack
func he_fp_pack(ph C.uint64_t, evh C.uint64_t, level C.int, depth C.int, count C.int, bin *C.uint64_t, ain *C.uint64_t, pos *C.int64_t, logScale C.double, threads C.int, ks *C.int, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	e := getEval(ph, evh)
	d := fpDepth(depth)
	if int(level) < 0 || int(level) > P.MaxLevel() {
		fail(codeArgument, "level %d out of range", level)
	}
	if count < 1 {
		fail(codeArgument, "nothing to pack")
	}
	G, N, L := 1<<d, P.N(), int(level)+1
	b := &fastpack.Batch{N: N, Level: int(level), Depth: d, Count: int(count),
		B: u64s(bin, int(count)*L*G), A: u64s(ain, int(count)*L*N)}
	positions := make([]int, count)
	for t, v := range i64s(pos, int(count)) {
		positions[t] = int(v)
	}
	e.requireGalois(fastpack.PackGaloisElements(P.Parameters, d), "pack")
	res, n, err := fastpack.NewPacker(P.Parameters, e.evk).Pack(b, positions, int(threads))
	check(err, codeArgument, "pack")
	res.Scale = rlwe.NewScale(math.Exp2(float64(logScale)))
	res.LogDimensions = ringDims(0)
	res.IsBatched = false
	*ks = C.int(n)
	newCT(ph, res, out)
	return codeOK
}

// lweBatchAsFast views an LWEBatch (constant-term RLWE form, coefficient domain) as a
// depth-0 fastpack batch (copies).
func lweBatchAsFast(N int, b *LWEBatch) *fastpack.Batch {
	L := b.level + 1
	fb := &fastpack.Batch{N: N, Level: b.level, Depth: 0, Count: len(b.cts),
		B: make([]uint64, len(b.cts)*L), A: make([]uint64, len(b.cts)*L*N)}
	for t, ct := range b.cts {
		if ct.IsNTT {
			fail(codeInternal, "LWE batch member in the NTT domain")
		}
		for l := 0; l < L; l++ {
			fb.B[t*L+l] = ct.Value[0].Coeffs[l][0]
			copy(fb.A[(t*L+l)*N:(t*L+l+1)*N], ct.Value[1].Coeffs[l])
		}
	}
	return fb
}
