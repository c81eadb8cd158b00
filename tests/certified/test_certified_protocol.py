"""The certified protocol end to end (in-process), honest runs."""

import numpy as np
import pytest

from secinfer.protocols.certified import usecases

from certified_helpers import run_certified


def _ok(res):
    for role, r in res.items():
        if isinstance(r, BaseException):
            raise r
    return res


def test_smart_metering_sum():
    rng = np.random.default_rng(0)
    x = np.round(rng.gamma(2.0, 0.2, 40), 3)          # half-hourly kWh readings
    res = _ok(run_certified(x, "sum"))
    u = usecases.get("sum")
    want = usecases.reference({"usecase": "sum"}, u.quantize(x)) / u.unit
    got = res["provider"].info["result"]
    assert abs(got - want) <= 1e-3 * abs(want)
    # the readings have 3 decimals: exact in Wh; within the paper's MARE of the float sum
    assert abs(got - x.sum()) <= 5.1e-5 * x.sum()
    assert res["data_source"].output[0] == got
    assert abs(res["user"].info["result"] - got) < 1e-2


def test_disease_susceptibility_weighted_sum():
    rng = np.random.default_rng(1)
    x = rng.integers(0, 3, 60).astype(float)           # SNP values in {0, 1, 2}
    w = rng.uniform(0, 1, 60)
    res = _ok(run_certified(x, "weighted-sum", {"weights": w.tolist()}))
    want = float(np.dot(w, x))
    got = res["provider"].info["result"]
    assert abs(got - want) <= 2.2e-5 * abs(want)     # the paper's MARE


def test_location_tracking_distance():
    rng = np.random.default_rng(2)
    steps = rng.uniform(-1.5, 1.5, (15, 2))
    trace = np.cumsum(np.vstack([[10.0, 20.0], steps]), axis=0)   # 16 points, units of 1/16
    x = trace.reshape(-1)
    res = _ok(run_certified(x, "distance", {"step_bound": 3.0}))
    u = usecases.get("distance")
    desc = usecases.describe("distance", x.size, None, 3.0)
    d = u.quantize(x)
    poly = usecases.reference(desc, d) / 16
    exact = usecases.reference(desc, d, exact=True) / 16
    got = res["provider"].info["result"]
    assert abs(got - poly) <= 1e-3 * abs(poly)       # CKKS budget around the polynomial
    assert abs(got - exact) <= 1.5e-2 * exact        # the paper's MARE (sqrt approximated)


def test_weighted_sum_batches_span_two_ciphertexts():
    """The SNPs are signed in batches of one ciphertext each (600 points at 512 slots: two
    signed messages of 512 and 88 points, two proofs)."""
    from secinfer.protocols.certified import protocol as P
    from secinfer.crypto.he.params import get_params

    u = usecases.get("weighted-sum")
    slots = get_params(u.test_params).n // 2
    assert P.batch_size(u, slots) == slots and P.batch_size(usecases.get("sum"), slots) == 1
    rng = np.random.default_rng(3)
    x = rng.integers(0, 3, slots + 88).astype(float)
    w = rng.uniform(0, 1, x.size)
    res = _ok(run_certified(x, "weighted-sum", {"weights": w.tolist()}))
    want = float(np.dot(w, x))
    assert abs(res["provider"].info["result"] - want) <= 2.2e-5 * abs(want)


def test_batched_message_layout():
    from secinfer.protocols.certified import protocol as P

    u = usecases.get("weighted-sum")
    d = np.array([0, 1, 2, 1, -3])
    m = P.make_message(u, d, b"\x07" * 16, 5, 1234)
    assert len(m) == P.message_bytes(u, 5) == 5 + 22
    assert m[:5] == bytes([0, 1, 2, 1, 0xFD]) and m[-6:] == b"\x00\x05\x00\x00\x04\xd2"
    assert np.array_equal(P.data_of(u, m), d)
