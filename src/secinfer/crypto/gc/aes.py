"""AES-128 as a boolean circuit (the general-circuit benchmark of [ASTRA 6.1.1]).

Built from scratch with ``Builder``: SubBytes computes the GF(2^8) inverse as x^254 with
free (linear) squarings and 4 field multiplications arranged as a depth-3 tree
(x^2 x^4)(x^8 x^16)(x^32 x^64) x^128, then the affine map; ShiftRows, MixColumns,
AddRoundKey and the key schedule are XOR/INV only. Bits are LSB-first polynomial
coefficients; bytes in the FIPS-197 order (state[r][c] = in[r + 4c]).
Inputs: "key" (128 bits), "pt" (128 bits); output: 128 ciphertext bits.
"""

from __future__ import annotations

from functools import lru_cache

from secinfer.crypto.gc.circuit import ONE, ZERO, Builder, Circuit

_POLY = 0x11B


def _gf_mulx_pow(i: int) -> int:
    v = 1
    for _ in range(i):
        v <<= 1
        if v & 0x100:
            v ^= _POLY
    return v


_REDUCE = [_gf_mulx_pow(k) for k in range(15)]     # x^k mod p as a byte


def _xor_many(b: Builder, ws: list) -> int:
    out = ZERO
    for w in ws:
        out = b.xor(out, w)
    return out


def gf_mul(b: Builder, x: list, y: list) -> list:
    prod = [[] for _ in range(15)]
    for i in range(8):
        for j in range(8):
            prod[i + j].append(b.and_(x[i], y[j]))
    coeff = [_xor_many(b, p) for p in prod]
    return [_xor_many(b, [coeff[k] for k in range(15) if (_REDUCE[k] >> bit) & 1]) for bit in range(8)]


def gf_square(b: Builder, x: list) -> list:
    return [_xor_many(b, [x[i] for i in range(8) if (_REDUCE[2 * i] >> bit) & 1]) for bit in range(8)]


def sbox(b: Builder, x: list) -> list:
    p = [x]
    for _ in range(7):
        p.append(gf_square(b, p[-1]))          # p[k] = x^(2^k)
    t1, t2, t3 = gf_mul(b, p[1], p[2]), gf_mul(b, p[3], p[4]), gf_mul(b, p[5], p[6])
    inv = gf_mul(b, gf_mul(b, t1, t2), gf_mul(b, t3, p[7]))   # x^254
    out = []
    for i in range(8):
        v = _xor_many(b, [inv[i], inv[(i + 4) % 8], inv[(i + 5) % 8], inv[(i + 6) % 8], inv[(i + 7) % 8]])
        out.append(b.xor(v, ONE) if (0x63 >> i) & 1 else v)
    return out


def _xtime(b: Builder, a: list) -> list:
    hi = a[7]
    out = [ZERO] + a[:7]
    return [b.xor(out[i], hi) if (0x1B >> i) & 1 else out[i] for i in range(8)]


def _xorb(b: Builder, u: list, v: list) -> list:
    return [b.xor(p, q) for p, q in zip(u, v)]


def _const_byte(b: Builder, x: list, c: int) -> list:
    return [b.xor(x[i], ONE) if (c >> i) & 1 else x[i] for i in range(8)]


@lru_cache(maxsize=None)
def aes128_circuit() -> Circuit:
    b = Builder()
    key, pt = b.input("key", 128), b.input("pt", 128)
    kb = [key[8 * i:8 * i + 8] for i in range(16)]
    words = [kb[4 * i:4 * i + 4] for i in range(4)]
    rcon = 1
    for i in range(4, 44):
        t = list(words[i - 1])
        if i % 4 == 0:
            t = [sbox(b, byte) for byte in t[1:] + t[:1]]
            t[0] = _const_byte(b, t[0], rcon)
            rcon = (rcon << 1) ^ (0x11B if rcon & 0x80 else 0)   # xtime
        words.append([_xorb(b, words[i - 4][j], t[j]) for j in range(4)])
    round_keys = [[byte for w in words[4 * r:4 * r + 4] for byte in w] for r in range(11)]
    state = [_xorb(b, pt[8 * i:8 * i + 8], round_keys[0][i]) for i in range(16)]
    for rnd in range(1, 11):
        state = [sbox(b, s) for s in state]
        state = [state[((c + r) % 4) * 4 + r] for c in range(4) for r in range(4)]   # ShiftRows
        if rnd != 10:
            mixed = []
            for c in range(4):
                a = state[4 * c:4 * c + 4]
                for r in range(4):
                    two, three = _xtime(b, a[r]), _xorb(b, _xtime(b, a[(r + 1) % 4]), a[(r + 1) % 4])
                    mixed.append(_xorb(b, _xorb(b, two, three), _xorb(b, a[(r + 2) % 4], a[(r + 3) % 4])))
            state = mixed
        state = [_xorb(b, state[i], round_keys[rnd][i]) for i in range(16)]
    return b.build([w for s in state for w in s])
