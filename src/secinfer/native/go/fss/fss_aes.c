// Batched fixed-key AES-128 MMO hash with the x86-64 AES instructions, eight blocks in
// flight (the AES unit is pipelined: one block at a time waits for each round's latency).
// Called from fss_aesni.go; where the instructions are missing (other CPUs or
// architectures) fss_aesni_supported() is 0 and the Go side uses crypto/aes instead.
// Checked against `cryptography`'s AES by tests/fss/test_fss_native.py.
#include <stddef.h>
#include <stdint.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>

#define FSS_AES_TARGET __attribute__((target("aes,sse2")))

static __m128i fss_rk[11];

int fss_aesni_supported(void) {
    unsigned int a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) {
        return 0;
    }
    return (c & bit_AES) != 0;
}

// One step of the AES-128 key schedule: assist = aeskeygenassist(prev, rcon).
FSS_AES_TARGET static __m128i fss_key_step(__m128i prev, __m128i assist) {
    assist = _mm_shuffle_epi32(assist, 0xff);
    prev = _mm_xor_si128(prev, _mm_slli_si128(prev, 4));
    prev = _mm_xor_si128(prev, _mm_slli_si128(prev, 4));
    prev = _mm_xor_si128(prev, _mm_slli_si128(prev, 4));
    return _mm_xor_si128(prev, assist);
}

#define FSS_KEY_ROUND(i, rcon) \
    fss_rk[i] = fss_key_step(fss_rk[(i) - 1], _mm_aeskeygenassist_si128(fss_rk[(i) - 1], rcon))

FSS_AES_TARGET void fss_aesni_setkey(const uint8_t *key) {
    fss_rk[0] = _mm_loadu_si128((const __m128i *)key);
    FSS_KEY_ROUND(1, 0x01);
    FSS_KEY_ROUND(2, 0x02);
    FSS_KEY_ROUND(3, 0x04);
    FSS_KEY_ROUND(4, 0x08);
    FSS_KEY_ROUND(5, 0x10);
    FSS_KEY_ROUND(6, 0x20);
    FSS_KEY_ROUND(7, 0x40);
    FSS_KEY_ROUND(8, 0x80);
    FSS_KEY_ROUND(9, 0x1b);
    FSS_KEY_ROUND(10, 0x36);
}

#define FSS_ROUND8(k)                                                           \
    do {                                                                        \
        s0 = _mm_aesenc_si128(s0, k); s1 = _mm_aesenc_si128(s1, k);             \
        s2 = _mm_aesenc_si128(s2, k); s3 = _mm_aesenc_si128(s3, k);             \
        s4 = _mm_aesenc_si128(s4, k); s5 = _mm_aesenc_si128(s5, k);             \
        s6 = _mm_aesenc_si128(s6, k); s7 = _mm_aesenc_si128(s7, k);             \
    } while (0)

// Every 16-byte block x of buf (nblocks of them) becomes AES_K(x) xor x. Eight blocks
// are kept in registers through the ten rounds (written out by hand: the compiler does
// not unroll the loops at the -O2 cgo uses).
FSS_AES_TARGET void fss_aesni_mmo(uint64_t *buf, size_t nblocks) {
    __m128i *p = (__m128i *)buf;
    const __m128i k0 = fss_rk[0], k10 = fss_rk[10];
    size_t i = 0;
    for (; i + 8 <= nblocks; i += 8) {
        __m128i s0 = _mm_xor_si128(_mm_loadu_si128(p + i + 0), k0);
        __m128i s1 = _mm_xor_si128(_mm_loadu_si128(p + i + 1), k0);
        __m128i s2 = _mm_xor_si128(_mm_loadu_si128(p + i + 2), k0);
        __m128i s3 = _mm_xor_si128(_mm_loadu_si128(p + i + 3), k0);
        __m128i s4 = _mm_xor_si128(_mm_loadu_si128(p + i + 4), k0);
        __m128i s5 = _mm_xor_si128(_mm_loadu_si128(p + i + 5), k0);
        __m128i s6 = _mm_xor_si128(_mm_loadu_si128(p + i + 6), k0);
        __m128i s7 = _mm_xor_si128(_mm_loadu_si128(p + i + 7), k0);
        FSS_ROUND8(fss_rk[1]);
        FSS_ROUND8(fss_rk[2]);
        FSS_ROUND8(fss_rk[3]);
        FSS_ROUND8(fss_rk[4]);
        FSS_ROUND8(fss_rk[5]);
        FSS_ROUND8(fss_rk[6]);
        FSS_ROUND8(fss_rk[7]);
        FSS_ROUND8(fss_rk[8]);
        FSS_ROUND8(fss_rk[9]);
        // last round, then the MMO feed-forward with the (still unmodified) input block
        _mm_storeu_si128(p + i + 0, _mm_xor_si128(_mm_aesenclast_si128(s0, k10), _mm_loadu_si128(p + i + 0)));
        _mm_storeu_si128(p + i + 1, _mm_xor_si128(_mm_aesenclast_si128(s1, k10), _mm_loadu_si128(p + i + 1)));
        _mm_storeu_si128(p + i + 2, _mm_xor_si128(_mm_aesenclast_si128(s2, k10), _mm_loadu_si128(p + i + 2)));
        _mm_storeu_si128(p + i + 3, _mm_xor_si128(_mm_aesenclast_si128(s3, k10), _mm_loadu_si128(p + i + 3)));
        _mm_storeu_si128(p + i + 4, _mm_xor_si128(_mm_aesenclast_si128(s4, k10), _mm_loadu_si128(p + i + 4)));
        _mm_storeu_si128(p + i + 5, _mm_xor_si128(_mm_aesenclast_si128(s5, k10), _mm_loadu_si128(p + i + 5)));
        _mm_storeu_si128(p + i + 6, _mm_xor_si128(_mm_aesenclast_si128(s6, k10), _mm_loadu_si128(p + i + 6)));
        _mm_storeu_si128(p + i + 7, _mm_xor_si128(_mm_aesenclast_si128(s7, k10), _mm_loadu_si128(p + i + 7)));
    }
    for (; i < nblocks; i++) {
        __m128i x = _mm_loadu_si128(p + i);
        __m128i s = _mm_xor_si128(x, k0);
        for (int r = 1; r < 10; r++) {
            s = _mm_aesenc_si128(s, fss_rk[r]);
        }
        s = _mm_aesenclast_si128(s, k10);
        _mm_storeu_si128(p + i, _mm_xor_si128(s, x));
    }
}

#else

int fss_aesni_supported(void) { return 0; }
void fss_aesni_setkey(const uint8_t *key) { (void)key; }
void fss_aesni_mmo(uint64_t *buf, size_t nblocks) { (void)buf; (void)nblocks; }

#endif
