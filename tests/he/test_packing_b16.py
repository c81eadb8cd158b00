"""The b = 16 packing set [SAFHIRE Table 2: b = 16 keeps b = 12's noise level with a finer
gadget]: rlwe-n11-q53-w11-128 (11-bit key-switching digits, 5 of them) and its small-ring
twin rlwe-n9-w11-insecure. Packing decrypts exactly with the Table 1 key-switch counts, and a
partial ciphertext's noise (which keeps its last key switches' noise whole) drops with the
digit width as the key-switch noise bound says."""

import numpy as np
import pytest

from secinfer.crypto import he
from secinfer.crypto.he import packing as pk
from secinfer.crypto.he.params import HE_STANDARD_128

B16 = "rlwe-n11-q53-w11-128"
SMALL_W11 = "rlwe-n9-w11-insecure"      # N = 512: B16's prime and digits
SMALL_W18 = "rlwe-n9-insecure"          # N = 512: the b = 12 set's prime and digits


def _ctx(name: str):
    P = he.get_params(name)
    kp = P.keygen()
    keys = P.gen_eval_keys(kp.sk, relin=False, galois=pk.pack_galois_elements(P, 0))
    return P, kp, keys, he.Evaluator(P, keys)


@pytest.fixture(scope="module")
def small():
    P, kp, keys, ev = _ctx(SMALL_W11)
    yield P, kp, ev
    ev.close()
    keys.close()
    kp.close()


def test_b16_profile_is_a_128_bit_set_with_five_11_bit_digits():
    prof = pk.profile(16)
    assert prof.params_name == B16
    P = prof.params()
    assert P.security_bits == 128 and P.spec.log_qp <= HE_STANDARD_128[P.log_n] and P.log_n == 11
    assert P.max_level == 0 and P.spec.key_base2 == 11 and P.spec.key_switching
    assert -(-P.q[0].bit_length() // P.spec.key_base2) == 5            # digits of the gadget
    # the same ring and prime as b = 12, finer digits (Table 2's D = 310 against b = 12's)
    P12 = pk.profile(12).params()
    assert P12.q == P.q and P12.n == P.n and P12.spec.key_base2 > P.spec.key_base2
    assert P12.fingerprint != P.fingerprint                          # other key layout
    assert 2 ** prof.log_delta * 2 ** 16 <= P.q[0]


@pytest.mark.parametrize("gamma", [0, 1, 2])
@pytest.mark.parametrize("count", [512, 64, 5])
def test_pack_exact_with_table1_key_switches(small, gamma, count):
    P, kp, ev = small
    prof = pk.profile(16, SMALL_W11)
    rng = np.random.default_rng(100 * gamma + count)
    x = rng.integers(-(1 << 15), 1 << 15, P.n)
    chunk = pk.encrypt_powers(P, x, kp.sk, prof.input_log_scale(gamma), gamma)
    batch = pk.extract(P, [chunk], np.arange(count), gamma=gamma)
    for c in chunk:
        c.close()
    ct, ks = pk.pack(ev, batch)
    with ct:
        got = pk.decode(P, ct, kp.sk, prof.log_delta)
    pos = np.arange(P.n) if count == P.n else he.spread_positions(count, P.n)
    np.testing.assert_array_equal(got[pos], x[:count])
    assert ks == pk.expected_key_switches(P.log_n, count, gamma)
    if count == P.n:
        assert ks == P.n // 2 ** gamma - 1                               # 1, 1/2, 1/4 per value


@pytest.mark.parametrize("gamma", [0, 2])
def test_finer_digits_cut_the_noise_of_a_partial_ciphertext(gamma):
    """Same prime, same ring, one linear layer packed into 64 of 512 coefficients: the
    noise of 18-bit digits is ~2^7 above that of 11-bit digits (key-switch noise ~ 2^w), and
    the 11-bit noise stays under one key switch's bound 2^(w + logN/2 + 6), far below the
    decoding bound delta / 2."""
    rng = np.random.default_rng(7 + gamma)
    x = rng.integers(-100, 100, 256)
    W = rng.integers(-7, 8, (64, 256))
    std = {}
    for name in (SMALL_W11, SMALL_W18):
        P, kp, keys, ev = _ctx(name)
        prof = pk.profile(16, name)
        try:
            e = pk.pipeline_noise(prof, kp, ev, gamma, x, W).astype(np.float64)
        finally:
            ev.close()
            keys.close()
            kp.close()
        assert np.abs(e).max() < 2 ** prof.log_delta / 2
        std[name] = float(np.std(e))
        if name == SMALL_W11:
            assert np.abs(e).max() < 2.0 ** (11 + P.log_n / 2 + 6)
    assert np.log2(std[SMALL_W18]) - np.log2(std[SMALL_W11]) > 4.5
