package main

/*
#include <stdint.h>
*/
import "C"

import "math/bits"

// DCF key generation [BCG+21 Fig. 1, Gen^<], the native twin of dcf.dcf_gen (see
// fss_dcf.go for the layout). Per level, both parties' seeds are hashed with per-key
// tweaks so that the outputs read [keep seed, lose seed, keep values, lose values]
// (keep side = the bit of alpha); with V_alpha the value accumulated along alpha's path:
//
//	e     = v_lose(1) - v_lose(0) + alpha_i beta
//	V_cw  = (-1)^t1 (e - V_alpha)                  (stored packed, reduced per entry)
//	V_alpha <- e + v_keep(0) - v_keep(1)
//	s_cw  = lose seed(0) xor lose seed(1), lowest bit cleared
//	t_cw  = (keep: t_keep(0) xor t_keep(1) xor 1, lose: t_lose(0) xor t_lose(1)) as (L, R)
//	s(b)  <- keep seed(b) (lowest bit cleared) xor t(b) s_cw,  t(b) <- t_keep(b) xor t(b) t_cw^keep
//
// and at the leaf final = (-1)^t1 (Convert(s(1)) - Convert(s(0)) - V_alpha).
// The root seeds come from the caller (drawn from the injected PRG in Python, lowest bit
// cleared), so both implementations produce the same keys from the same PRG.

type dcfGenArgs struct {
	sh           *dcfShape
	count        int
	alpha, beta  []uint64
	root0, root1 []uint64
	scw, final   []uint64
	tcw, vcw     []byte
	impl         int
}

// subInto: dst = a - b (entry-wise mod 2^(64 L)).
func subInto(dst, a, b []uint64, lim int) {
	if lim == 1 {
		for i := range dst {
			dst[i] = a[i] - b[i]
		}
		return
	}
	for i := 0; i+1 < len(dst); i += 2 {
		var c uint64
		dst[i], c = bits.Sub64(a[i], b[i], 0)
		dst[i+1] = a[i+1] - b[i+1] - c
	}
}

func (g *dcfGenArgs) chunk(k0, k1 int) {
	sh, B := g.sh, g.count
	n, nv, words, w, lim := sh.n, sh.nv, sh.words, sh.w, sh.lim
	cnt := k1 - k0
	tw := 2 + 2*nv
	hb := make([]uint64, 2*cnt*tw*2) // [party][key][tweak][2]
	var s [2][]uint64
	var t [2][]uint64
	for p := 0; p < 2; p++ {
		s[p] = make([]uint64, 2*cnt)
		t[p] = make([]uint64, cnt)
	}
	copy(s[0], g.root0[2*k0:2*k1])
	copy(s[1], g.root1[2*k0:2*k1])
	for j := 0; j < cnt; j++ {
		t[1][j] = 1
	}
	va := make([]uint64, cnt*words)
	e := make([]uint64, words)
	d := make([]uint64, words)
	v := make([]uint64, words)
	ab := make([]uint64, words)
	for i := 0; i < n; i++ {
		shift := uint(n - 1 - i)
		for p := 0; p < 2; p++ {
			for j := 0; j < cnt; j++ {
				a := (g.alpha[k0+j] >> shift) & 1
				h := hb[(p*cnt+j)*tw*2 : (p*cnt+j+1)*tw*2]
				s0, s1 := s[p][2*j], s[p][2*j+1]
				h[0], h[1] = s0^a, s1
				h[2], h[3] = s0^(1-a), s1
				vk, vl := 2+a*uint64(nv), 2+(1-a)*uint64(nv)
				for q := 0; q < nv; q++ {
					h[4+2*q], h[5+2*q] = s0^(vk+uint64(q)), s1
					h[4+2*nv+2*q], h[5+2*nv+2*q] = s0^(vl+uint64(q)), s1
				}
			}
		}
		mmoHashInPlace(hb, g.impl)
		tshift := uint(2 * (i % 4))
		for j := 0; j < cnt; j++ {
			kb := k0 + j
			a := (g.alpha[kb] >> shift) & 1
			am := -a
			h0 := hb[j*tw*2 : (j+1)*tw*2]
			h1 := hb[(cnt+j)*tw*2 : (cnt+j+1)*tw*2]
			vkeep0, vlose0 := h0[4:4+words], h0[4+2*nv:4+2*nv+words]
			vkeep1, vlose1 := h1[4:4+words], h1[4+2*nv:4+2*nv+words]
			acc := va[j*words : (j+1)*words]
			for k := 0; k < words; k++ {
				ab[k] = g.beta[kb*words+k] & am
			}
			subInto(e, vlose1, vlose0, lim)
			addInto(e, ab, lim)
			subInto(d, e, acc, lim)
			condNegReduce(v, d, -t[1][j], sh)
			row := g.vcw[(i*B+kb)*w : (i*B+kb+1)*w]
			storeEntries(row, v, sh)
			// V_alpha = e + v_keep(0) - v_keep(1)
			addInto(e, vkeep0, lim)
			subInto(acc, e, vkeep1, lim)

			scw0 := (h0[2] ^ h1[2]) &^ 1
			scw1 := h0[3] ^ h1[3]
			tk0, tk1 := h0[0]&1, h1[0]&1
			tcwKeep := tk0 ^ tk1 ^ 1
			tcwLose := (h0[2] & 1) ^ (h1[2] & 1)
			tcwL := tcwKeep ^ ((tcwKeep ^ tcwLose) & a) // keep side is R when a = 1
			tcwR := tcwLose ^ ((tcwLose ^ tcwKeep) & a)
			g.scw[(i*B+kb)*2], g.scw[(i*B+kb)*2+1] = scw0, scw1
			tb := byte((tcwL | tcwR<<1) << tshift)
			if i%4 == 0 {
				g.tcw[(i/4)*B+kb] = tb
			} else {
				g.tcw[(i/4)*B+kb] |= tb
			}
			for p, h := range [2][]uint64{h0, h1} {
				m := -t[p][j]
				s[p][2*j] = (h[0] &^ 1) ^ (scw0 & m)
				s[p][2*j+1] = h[1] ^ (scw1 & m)
				t[p][j] = (h[0] & 1) ^ (t[p][j] & tcwKeep)
			}
		}
	}
	// Leaf correction: hash both parties' final seeds with the conversion tweaks.
	hc := hb[:2*cnt*nv*2]
	for p := 0; p < 2; p++ {
		for j := 0; j < cnt; j++ {
			s0, s1 := s[p][2*j], s[p][2*j+1]
			base := (p*cnt + j) * nv * 2
			for q := 0; q < nv; q++ {
				hc[base+2*q], hc[base+2*q+1] = s0^uint64(2+2*nv+q), s1
			}
		}
	}
	mmoHashInPlace(hc, g.impl)
	for j := 0; j < cnt; j++ {
		kb := k0 + j
		c0 := hc[j*nv*2 : j*nv*2+words]
		c1 := hc[(cnt+j)*nv*2 : (cnt+j)*nv*2+words]
		subInto(d, c1, c0, lim)
		subInto(d, d, va[j*words:(j+1)*words], lim)
		condNegReduce(g.final[kb*words:(kb+1)*words], d, -t[1][j], sh)
	}
}

// fss_dcf_gen: both parties' keys for f^<_{alpha[b], beta[b]}, b < count. Inputs alpha
// (B,), beta (B, P, L) (reduced here per entry), root seeds (B, 2) each; outputs s_cw,
// t_cw, v_cw (shared by both keys) and final (B, P, L).
//
//export fss_dcf_gen
func fss_dcf_gen(n, outBits, pay C.int, entryBits *C.int32_t, nbits C.int64_t, count C.int64_t,
	alpha *C.uint64_t, alphaLen C.int64_t, beta *C.uint64_t, betaLen C.int64_t,
	root0 *C.uint64_t, root0Len C.int64_t, root1 *C.uint64_t, root1Len C.int64_t,
	scw *C.uint64_t, scwLen C.int64_t, tcw *C.uint8_t, tcwLen C.int64_t,
	vcw *C.uint8_t, vcwLen C.int64_t, final *C.uint64_t, finalLen C.int64_t,
	threads, impl C.int, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	mmoInit()
	sh := newDCFShape(int(n), int(outBits), int(pay), entryBits, int64(nbits))
	B := checkCount(int64(count))
	b64, n64, words := int64(B), int64(sh.n), int64(sh.words)
	need("alpha", int64(alphaLen), b64)
	need("beta", int64(betaLen), b64*words)
	need("root seed 0", int64(root0Len), 2*b64)
	need("root seed 1", int64(root1Len), 2*b64)
	need("s_cw", int64(scwLen), n64*b64*2)
	need("t_cw", int64(tcwLen), int64(sh.tb)*b64)
	need("v_cw", int64(vcwLen), n64*b64*int64(sh.w))
	need("final", int64(finalLen), b64*words)
	g := &dcfGenArgs{sh: sh, count: B, alpha: u64s(alpha, B), root0: u64s(root0, 2*B), root1: u64s(root1, 2*B),
		scw: u64s(scw, sh.n*B*2), final: u64s(final, B*sh.words),
		tcw: u8s(tcw, sh.tb*B), vcw: u8s(vcw, sh.n*B*sh.w), impl: int(impl)}
	if sh.n < 64 {
		for _, a := range g.alpha {
			if a>>uint(sh.n) != 0 {
				fail(codeArgument, "DCF alpha must be < 2^%d", sh.n)
			}
		}
	}
	// Reduced copy of beta (the caller's buffer is not written).
	src := u64s(beta, B*sh.words)
	g.beta = make([]uint64, len(src))
	for k := range src {
		g.beta[k] = src[k] & sh.mask[k%sh.words]
	}
	nch := (B + dcfGenChunk - 1) / dcfGenChunk
	parallelChunks(nch, int(threads), func(c int) {
		g.chunk(c*dcfGenChunk, min((c+1)*dcfGenChunk, B))
	})
	return codeOK
}
