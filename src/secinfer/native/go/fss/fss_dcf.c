// DCF key generation and evaluation kernels [BCG+21 Fig. 1], the native twins of
// secinfer/crypto/fss/dcf.py (dcf_gen / dcf_eval): the same keys byte for byte and the same
// shares, tested against the numpy code by tests/fss/test_fss_native.py.
//
// Called from fss_dcf.go, one call per chunk of keys (generation) or points (evaluation),
// after the Go side has checked every buffer length against the shape; the indices below
// stay inside those lengths (key kb < B, level i < n, bytes kb W + eoff[p] + ebytes[p] <= B W).
// Nothing is kept after a call returns. Scratch memory comes from the caller.
//
// Layout (as numpy stores it), B keys:
//   seed (B, 2) u64 | s_cw (n, B, 2) u64 | t_cw (ceil(2n/8), B) u8 | v_cw (n, B, W) u8 |
//   final (B, P, L) u64;  t_cw: level i in bits 2 (i mod 4) (L) and 2 (i mod 4) + 1 (R).
// A payload vector is P entries of L limbs (L = 1 for k <= 64, else 2), word p L + l;
// the value words of a hash output are its first P L words. Sums are taken mod 2^(64 L)
// per entry and reduced mod 2^k_p once, as in numpy. Hash tweaks: the seed of child c uses
// c, its value blocks 2 + c nv + q, the leaf conversion 2 + 2 nv + q (q < nv).
//
// The control bits t and the bits of alpha select with masks, never with branches.
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "_cgo_export.h"

void fss_aesni_mmo(uint64_t *buf, size_t nblocks);

typedef unsigned __int128 fss_u128;

// The shape table built by fss_dcf.go (dcfShape.table): header then 6 words per entry.
enum { SH_N, SH_LIM, SH_PAY, SH_WORDS, SH_NV, SH_W, SH_HDR };
enum { E_OFF, E_BYTES, E_LOMASK, E_HIMASK, E_MASK0, E_MASK1, E_STRIDE };

static void mmo(uint64_t *buf, size_t nblocks, int aesni) {
    if (aesni) {
        fss_aesni_mmo(buf, nblocks);
    } else {
        fss_go_mmo(buf, nblocks); // crypto/aes, where the AES instructions are missing
    }
}

static inline uint64_t ld64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline void st64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

static inline fss_u128 get128(const uint64_t *w) { return ((fss_u128)w[1] << 64) | w[0]; }

static inline void put128(uint64_t *w, fss_u128 v) {
    w[0] = (uint64_t)v;
    w[1] = (uint64_t)(v >> 64);
}

// Entry p of a packed row: lv[at : at + ebytes] little-endian, as (lo, hi). When 16 bytes
// from `at` are inside the level block (len bytes), two whole words are read and masked.
static inline void load_entry(const uint8_t *lv, int64_t at, int64_t len, const uint64_t *e,
                              uint64_t *lo, uint64_t *hi) {
    if (at + 16 <= len) {
        *lo = ld64(lv + at) & e[E_LOMASK];
        *hi = ld64(lv + at + 8) & e[E_HIMASK];
        return;
    }
    uint8_t tmp[16] = {0};
    memcpy(tmp, lv + at, (size_t)e[E_BYTES]);
    *lo = ld64(tmp);
    *hi = ld64(tmp + 8);
}

// Entry p (reduced, so its bytes past ebytes are zero) into row (W bytes) at eoff. An entry
// with 16 bytes of row from its start is written as two words: the bytes past it belong
// to later entries of the same row, which are written afterwards.
static inline void store_entry(uint8_t *row, int64_t w, const uint64_t *e, uint64_t lo, uint64_t hi) {
    int64_t at = (int64_t)e[E_OFF];
    if (at + 16 <= w) {
        st64(row + at, lo);
        st64(row + at + 8, hi);
        return;
    }
    uint8_t tmp[16];
    st64(tmp, lo);
    st64(tmp + 8, hi);
    memcpy(row + at, tmp, (size_t)e[E_BYTES]);
}

// (-1)^t v reduced per entry, t in {0, 1}; v, out: P L words.
static void cond_neg_reduce(uint64_t *out, const uint64_t *v, uint64_t t, const uint64_t *shape) {
    int64_t pay = (int64_t)shape[SH_PAY];
    uint64_t m = -t;
    const uint64_t *e = shape + SH_HDR;
    if (shape[SH_LIM] == 1) {
        for (int64_t p = 0; p < pay; p++, e += E_STRIDE) {
            out[p] = ((v[p] ^ m) + t) & e[E_MASK0];
        }
        return;
    }
    fss_u128 mm = ((fss_u128)m << 64) | m;
    for (int64_t p = 0; p < pay; p++, e += E_STRIDE) {
        fss_u128 r = (get128(v + 2 * p) ^ mm) + t;
        out[2 * p] = (uint64_t)r & e[E_MASK0];
        out[2 * p + 1] = (uint64_t)(r >> 64) & e[E_MASK1];
    }
}

// ------------------------------------------------------------------------- evaluation

// Points j0 .. j0 + cnt - 1 (point j belongs to key j / perK).
// scratch: cnt (2 (1 + nv) + 4 + P L) words.
void fss_dcf_eval_chunk(const uint64_t *shape, int party, int64_t B, int64_t perK, int64_t j0, int64_t cnt,
                        const uint64_t *seed, const uint64_t *scw, const uint8_t *tcw, const uint8_t *vcw,
                        const uint64_t *final, const uint64_t *x, uint64_t *out, uint64_t *scratch,
                        int aesni) {
    const int64_t n = (int64_t)shape[SH_N], lim = (int64_t)shape[SH_LIM], pay = (int64_t)shape[SH_PAY];
    const int64_t words = (int64_t)shape[SH_WORDS], nv = (int64_t)shape[SH_NV], w = (int64_t)shape[SH_W];
    const int64_t tw = 1 + nv, lvlen = B * w;
    uint64_t *hb = scratch;           // cnt (1 + nv) blocks
    uint64_t *s = hb + cnt * tw * 2;  // cnt seeds
    uint64_t *t = s + 2 * cnt;        // cnt control bits
    uint64_t *kbs = t + cnt;          // cnt key indices
    uint64_t *acc = kbs + cnt;        // cnt payload sums
    for (int64_t j = 0; j < cnt; j++) {
        int64_t kb = (j0 + j) / perK;
        kbs[j] = (uint64_t)kb;
        s[2 * j] = seed[2 * kb];
        s[2 * j + 1] = seed[2 * kb + 1];
        t[j] = (uint64_t)party;
    }
    memset(acc, 0, (size_t)(cnt * words) * sizeof(uint64_t));
    for (int64_t i = 0; i < n; i++) {
        const int shift = (int)(n - 1 - i);
        for (int64_t j = 0; j < cnt; j++) {
            uint64_t side = (x[j0 + j] >> shift) & 1;
            uint64_t *h = hb + j * tw * 2;
            uint64_t s0 = s[2 * j], s1 = s[2 * j + 1];
            uint64_t vt = 2 + side * (uint64_t)nv;
            h[0] = s0 ^ side;
            h[1] = s1;
            for (int64_t q = 0; q < nv; q++) {
                h[2 + 2 * q] = s0 ^ (vt + (uint64_t)q);
                h[3 + 2 * q] = s1;
            }
        }
        mmo(hb, (size_t)(cnt * tw), aesni);
        const int tshift = (int)(2 * (i % 4));
        const uint64_t *lvS = scw + i * B * 2;
        const uint8_t *lvT = tcw + (i / 4) * B;
        const uint8_t *lvV = vcw + i * lvlen;
        for (int64_t j = 0; j < cnt; j++) {
            const int64_t kb = (int64_t)kbs[j];
            const uint64_t *h = hb + j * tw * 2, *hv = h + 2;
            uint64_t *ac = acc + j * words;
            const uint64_t m = -t[j];
            const uint64_t *e = shape + SH_HDR;
            for (int64_t p = 0; p < pay; p++, e += E_STRIDE) {
                uint64_t lo, hi;
                load_entry(lvV, kb * w + (int64_t)e[E_OFF], lvlen, e, &lo, &hi);
                if (lim == 1) {
                    ac[p] += hv[p] + (lo & m);
                } else {
                    put128(ac + 2 * p, get128(ac + 2 * p) + get128(hv + 2 * p) +
                                           ((((fss_u128)(hi & m)) << 64) | (lo & m)));
                }
            }
            uint64_t side = (x[j0 + j] >> shift) & 1;
            uint64_t tc = ((uint64_t)lvT[kb] >> (tshift + (int)side)) & 1;
            s[2 * j] = (h[0] & ~(uint64_t)1) ^ (lvS[2 * kb] & m);
            s[2 * j + 1] = h[1] ^ (lvS[2 * kb + 1] & m);
            t[j] = (h[0] & 1) ^ (t[j] & tc);
        }
    }
    // Leaf: Convert(s) + t final, negated for party 1, reduced per entry.
    for (int64_t j = 0; j < cnt; j++) {
        uint64_t *h = hb + j * nv * 2;
        for (int64_t q = 0; q < nv; q++) {
            h[2 * q] = s[2 * j] ^ (uint64_t)(2 + 2 * nv + q);
            h[2 * q + 1] = s[2 * j + 1];
        }
    }
    mmo(hb, (size_t)(cnt * nv), aesni);
    for (int64_t j = 0; j < cnt; j++) {
        const int64_t kb = (int64_t)kbs[j];
        const uint64_t *cv = hb + j * nv * 2, *fin = final + kb * words;
        uint64_t *ac = acc + j * words;
        const uint64_t m = -t[j];
        if (lim == 1) {
            for (int64_t p = 0; p < pay; p++) {
                ac[p] += cv[p] + (fin[p] & m);
            }
        } else {
            for (int64_t p = 0; p < pay; p++) {
                put128(ac + 2 * p, get128(ac + 2 * p) + get128(cv + 2 * p) +
                                       ((((fss_u128)(fin[2 * p + 1] & m)) << 64) | (fin[2 * p] & m)));
            }
        }
        cond_neg_reduce(out + (j0 + j) * words, ac, (uint64_t)party, shape);
    }
}

// ------------------------------------------------------------------------- generation

// Both parties' keys for keys k0 .. k0 + cnt - 1 (see fss_dcf.go for the recursion).
// beta is reduced per entry. scratch: cnt (4 (2 + 2 nv) + 6 + P L) words.
void fss_dcf_gen_chunk(const uint64_t *shape, int64_t B, int64_t k0, int64_t cnt, const uint64_t *alpha,
                       const uint64_t *beta, const uint64_t *root0, const uint64_t *root1, uint64_t *scw,
                       uint8_t *tcw, uint8_t *vcw, uint64_t *final, uint64_t *scratch, int aesni) {
    const int64_t n = (int64_t)shape[SH_N], lim = (int64_t)shape[SH_LIM], pay = (int64_t)shape[SH_PAY];
    const int64_t words = (int64_t)shape[SH_WORDS], nv = (int64_t)shape[SH_NV], w = (int64_t)shape[SH_W];
    const int64_t tw = 2 + 2 * nv; // [keep seed, lose seed, keep values, lose values]
    uint64_t *hb = scratch;           // [party][key][tw] blocks
    uint64_t *s0 = hb + 2 * cnt * tw * 2, *s1 = s0 + 2 * cnt;
    uint64_t *t0 = s1 + 2 * cnt, *t1 = t0 + cnt;
    uint64_t *va = t1 + cnt;          // V_alpha, cnt payload sums
    memcpy(s0, root0 + 2 * k0, (size_t)(2 * cnt) * sizeof(uint64_t));
    memcpy(s1, root1 + 2 * k0, (size_t)(2 * cnt) * sizeof(uint64_t));
    for (int64_t j = 0; j < cnt; j++) {
        t0[j] = 0;
        t1[j] = 1;
    }
    memset(va, 0, (size_t)(cnt * words) * sizeof(uint64_t));
    for (int64_t i = 0; i < n; i++) {
        const int shift = (int)(n - 1 - i);
        for (int party = 0; party < 2; party++) {
            const uint64_t *s = party ? s1 : s0;
            for (int64_t j = 0; j < cnt; j++) {
                uint64_t a = (alpha[k0 + j] >> shift) & 1;
                uint64_t *h = hb + (party * cnt + j) * tw * 2;
                uint64_t x0 = s[2 * j], x1 = s[2 * j + 1];
                uint64_t vk = 2 + a * (uint64_t)nv, vl = 2 + (1 - a) * (uint64_t)nv;
                h[0] = x0 ^ a;
                h[1] = x1;
                h[2] = x0 ^ (1 - a);
                h[3] = x1;
                for (int64_t q = 0; q < nv; q++) {
                    h[4 + 2 * q] = x0 ^ (vk + (uint64_t)q);
                    h[5 + 2 * q] = x1;
                    h[4 + 2 * nv + 2 * q] = x0 ^ (vl + (uint64_t)q);
                    h[5 + 2 * nv + 2 * q] = x1;
                }
            }
        }
        mmo(hb, (size_t)(2 * cnt * tw), aesni);
        const int tshift = (int)(2 * (i % 4));
        for (int64_t j = 0; j < cnt; j++) {
            const int64_t kb = k0 + j;
            const uint64_t a = (alpha[kb] >> shift) & 1, am = -a, tm = -t1[j];
            const uint64_t *h0 = hb + j * tw * 2, *h1 = hb + (cnt + j) * tw * 2;
            const uint64_t *vk0 = h0 + 4, *vl0 = h0 + 4 + 2 * nv, *vk1 = h1 + 4, *vl1 = h1 + 4 + 2 * nv;
            const uint64_t *be = beta + kb * words;
            uint64_t *acc = va + j * words;
            uint8_t *row = vcw + (i * B + kb) * w;
            const uint64_t *e = shape + SH_HDR;
            // e = v_lose(1) - v_lose(0) + alpha_i beta;  V_cw = (-1)^t1 (e - V_alpha);
            // V_alpha <- e + v_keep(0) - v_keep(1)
            if (lim == 1) {
                for (int64_t p = 0; p < pay; p++, e += E_STRIDE) {
                    uint64_t ev = vl1[p] - vl0[p] + (be[p] & am);
                    uint64_t v = (((ev - acc[p]) ^ tm) + t1[j]) & e[E_MASK0];
                    store_entry(row, w, e, v, 0);
                    acc[p] = ev + vk0[p] - vk1[p];
                }
            } else {
                const fss_u128 tmm = ((fss_u128)tm << 64) | tm;
                for (int64_t p = 0; p < pay; p++, e += E_STRIDE) {
                    fss_u128 ev = get128(vl1 + 2 * p) - get128(vl0 + 2 * p) +
                                  ((((fss_u128)(be[2 * p + 1] & am)) << 64) | (be[2 * p] & am));
                    fss_u128 v = ((ev - get128(acc + 2 * p)) ^ tmm) + t1[j];
                    store_entry(row, w, e, (uint64_t)v & e[E_MASK0], (uint64_t)(v >> 64) & e[E_MASK1]);
                    put128(acc + 2 * p, ev + get128(vk0 + 2 * p) - get128(vk1 + 2 * p));
                }
            }
            const uint64_t c0 = (h0[2] ^ h1[2]) & ~(uint64_t)1, c1 = h0[3] ^ h1[3];
            const uint64_t tkeep = (h0[0] & 1) ^ (h1[0] & 1) ^ 1;
            const uint64_t tlose = (h0[2] & 1) ^ (h1[2] & 1);
            const uint64_t tl = tkeep ^ ((tkeep ^ tlose) & a); // the keep side is R when a = 1
            const uint64_t tr = tlose ^ ((tlose ^ tkeep) & a);
            scw[(i * B + kb) * 2] = c0;
            scw[(i * B + kb) * 2 + 1] = c1;
            uint8_t tb = (uint8_t)((tl | (tr << 1)) << tshift);
            uint8_t *tcell = tcw + (i / 4) * B + kb;
            *tcell = (i % 4 == 0) ? tb : (uint8_t)(*tcell | tb);
            const uint64_t m0 = -t0[j], m1 = -t1[j];
            s0[2 * j] = (h0[0] & ~(uint64_t)1) ^ (c0 & m0);
            s0[2 * j + 1] = h0[1] ^ (c1 & m0);
            t0[j] = (h0[0] & 1) ^ (t0[j] & tkeep);
            s1[2 * j] = (h1[0] & ~(uint64_t)1) ^ (c0 & m1);
            s1[2 * j + 1] = h1[1] ^ (c1 & m1);
            t1[j] = (h1[0] & 1) ^ (t1[j] & tkeep);
        }
    }
    // Leaf: final = (-1)^t1 (Convert(s(1)) - Convert(s(0)) - V_alpha), reduced per entry.
    for (int party = 0; party < 2; party++) {
        const uint64_t *s = party ? s1 : s0;
        for (int64_t j = 0; j < cnt; j++) {
            uint64_t *h = hb + (party * cnt + j) * nv * 2;
            for (int64_t q = 0; q < nv; q++) {
                h[2 * q] = s[2 * j] ^ (uint64_t)(2 + 2 * nv + q);
                h[2 * q + 1] = s[2 * j + 1];
            }
        }
    }
    mmo(hb, (size_t)(2 * cnt * nv), aesni);
    for (int64_t j = 0; j < cnt; j++) {
        const uint64_t *cv0 = hb + j * nv * 2, *cv1 = hb + (cnt + j) * nv * 2;
        uint64_t *acc = va + j * words;
        if (lim == 1) {
            for (int64_t p = 0; p < pay; p++) {
                acc[p] = cv1[p] - cv0[p] - acc[p];
            }
        } else {
            for (int64_t p = 0; p < pay; p++) {
                put128(acc + 2 * p, get128(cv1 + 2 * p) - get128(cv0 + 2 * p) - get128(acc + 2 * p));
            }
        }
        cond_neg_reduce(final + (k0 + j) * words, acc, t1[j], shape);
    }
}
