"""Metered traffic of the ASTRA kernels against their declared costs (secinfer.protocols.astra.costs)."""

import numpy as np
import pytest

from astra_helpers import rand_input, rounds, run_servers, traffic
from secinfer.arith.ring import RING64
from secinfer.protocols.astra.costs import bitext_cost, matmul_cost, mul_cost


def _mul_body(n):
    def body(eng):
        with eng.ep.phase("offline"):
            x, y = rand_input(eng, (n,), "x"), rand_input(eng, (n,), "y")
            z, prep = eng.mul_offline(x, y)
            eng.finish_offline()
        with eng.ep.phase("online"):
            z = eng.mul_online(x, y, z, prep)
            if eng.malicious:
                eng.verify()
        with eng.ep.phase("setup"):   # reveal outside the metered phases
            return [eng.open_all(s, f"o{i}") for i, s in enumerate((x, y, z))]
    return body


@pytest.mark.parametrize("security", ["semi-honest", "malicious"])
def test_mul_cost_and_correctness(security):
    n = 200
    res, meters = run_servers(security, _mul_body(n), bucket=2, opened=0)
    x, y, z = res["p0"]
    assert np.array_equal(z, RING64.mul(x, y))
    assert all(np.array_equal(res[p][2], z) for p in res)
    want = mul_cost(n, security, 64, bucket=2, opened=0)
    assert traffic(meters, "online") == want["online_bits"]          # 2l / 4l per gate
    assert traffic(meters, "offline") == want["offline_bits"]        # l / 21l per gate
    assert rounds(meters, "online") == want["online_rounds"]
    if security == "malicious":
        # hashes are amortised: the same handful of digests whatever the number of gates
        _, m2 = run_servers(security, _mul_body(2 * n), bucket=2, opened=0)
        assert traffic(m2, "online", hashes=True) == traffic(meters, "online", hashes=True)
        assert traffic(m2, "offline", hashes=True) == traffic(meters, "offline", hashes=True)


def _dp_body(b, k, n):
    def body(eng):
        with eng.ep.phase("offline"):
            x, w = rand_input(eng, (b, k), "x"), rand_input(eng, (k, n), "w")
            u, prep = eng.matmul_offline(x, w)
            eng.finish_offline()
        with eng.ep.phase("online"):
            u = eng.matmul_online(x, w, u, prep)
            if eng.malicious:
                eng.verify()
        with eng.ep.phase("setup"):
            return [eng.open_all(s, f"o{i}") for i, s in enumerate((x, w, u))]
    return body


@pytest.mark.parametrize("security", ["semi-honest", "malicious"])
def test_dot_product_cost(security):
    online = {}
    for d in (16, 64):
        res, meters = run_servers(security, _dp_body(1, d, 1), bucket=2, opened=0)
        x, w, u = res["p1"]
        assert np.array_equal(u, RING64.matmul(x, w))
        want = matmul_cost(1, d, 1, security, 64, bucket=2, opened=0)
        online[d] = traffic(meters, "online")
        assert online[d] == want["online_bits"]
        assert traffic(meters, "offline") == want["offline_bits"]
        if security == "malicious":
            assert online[d] == (2 * d + 2) * 64                 # Lemma 5.1: 2d + 2 elements
    if security == "semi-honest":
        assert online[16] == online[64] == 2 * 64                 # independent of d [Fig. 11]


@pytest.mark.parametrize("k", [16, 64])
def test_receiver_checked_dot_product_cost(k):
    """Malicious prediction with ``reveal="direct"``: m*_w offline, d + 2 elements online in
    one round, and the three mul-mz hashes (P0's H(m*_z), unmasked with P2's pad of m*_x, and
    the evaluators' H(m_z - m_x m_w + delta_z)) agree in an honest run -- what the client
    compares."""
    def body(eng):
        with eng.ep.phase("offline"):
            x, w = rand_input(eng, (1, k), "x"), rand_input(eng, (k, 1), "w")
            u, prep = eng.matmul_offline(x, w, check_at="client")
            eng.finish_offline()
            eng.verify()
        with eng.ep.phase("online"):
            u = eng.products_recv(eng.products_send(x, w, u, prep, with_verify=True))
        with eng.ep.phase("setup"):
            return [eng.open_all(s, f"o{i}") for i, s in enumerate((x, w, u))], prep.mz_check
    res, meters = run_servers("malicious", body, bucket=2, opened=0)
    (x, w, u), (h0,) = res["p0"]
    assert np.array_equal(u, RING64.matmul(x, w))
    (h1,), (h2, pad2) = res["p1"][1], res["p2"][1]
    assert not np.array_equal(h0, h1)                            # P0's hash travels masked
    assert np.array_equal(np.bitwise_xor(h0, pad2), h1) and np.array_equal(h1, h2)
    want = matmul_cost(1, k, 1, "malicious", 64, bucket=2, opened=0, receiver_checked=True)
    assert traffic(meters, "online") == want["online_bits"] == (k + 2) * 64
    assert traffic(meters, "offline") == want["offline_bits"]
    assert rounds(meters, "online") == want["online_rounds"]


def test_matmul_batch_semi_honest():
    res, meters = run_servers("semi-honest", _dp_body(3, 20, 4))
    x, w, u = res["p2"]
    assert np.array_equal(u, RING64.matmul(x, w))
    assert traffic(meters, "online") == matmul_cost(3, 20, 4, "semi-honest")["online_bits"]


@pytest.mark.parametrize("security", ["semi-honest", "malicious"])
def test_bitext_cost_and_correctness(security):
    from secinfer.protocols.astra.bitext import bitext_offline, bitext_online
    from secinfer.protocols.astra.engine import AstraEngine
    n = 30

    def body(eng):
        beng = AstraEngine(eng.ep, eng.role, eng.keys, eng.security, 1)
        beng.out_h, beng.in_h = eng.out_h, eng.in_h
        with eng.ep.phase("offline"):
            a = rand_input(eng, (n,), "a")
            prep = bitext_offline(eng, a, beng)
            if eng.malicious:
                eng.verify()
        with eng.ep.phase("online"):
            bit = bitext_online(eng, a, prep, beng)
            if eng.malicious:
                eng.verify()
        with eng.ep.phase("setup"):
            return eng.open_all(a, "a"), beng.open_all(bit, "bit")
    res, meters = run_servers(security, body)
    a, bit = res["p0"]
    assert np.array_equal(bit, (a >> np.uint64(63)))
    want = bitext_cost(n, security)
    # y travels with H(output label) in one message (one hash per batch)
    assert traffic(meters, "online") == want["online_bits"] + want.get("online_hash_bits", 0)
    # the online half folds no hash (its checks are immediate), so the verify after it sends
    # nothing and costs no round (empty verify messages are not sent)
    assert rounds(meters, "online") == want["online_rounds"]


def test_trunc_error_budget():
    """Shared truncation: (m >> f) - (lambda >> f) is arshift(z, f) or one more [docs]."""
    from secinfer.arith.fixed import FX64
    n = 500

    def body(eng):
        with eng.ep.phase("offline"):
            z = rand_input(eng, (n,), "z")
        with eng.ep.phase("setup"):
            zv = eng.open_all(z, "zv")
        # small values: shift the random share into a +-2^40 range by a public offset
        small = (zv >> np.uint64(24)).astype(np.int64) - (1 << 39)
        zs = z.add_public(RING64.sub(RING64.from_signed(small), zv))
        with eng.ep.phase("offline"):
            zt, prep = eng.trunc_offline(zs, 13)
        with eng.ep.phase("online"):
            zt = eng.trunc_online(zs, zt, prep)
        with eng.ep.phase("setup"):
            return eng.open_all(zs, "a"), eng.open_all(zt, "b")
    res, meters = run_servers("semi-honest", body)
    v, t = res["p1"]
    diff = RING64.to_signed(RING64.sub(t, FX64.trunc(v)))
    assert set(np.unique(diff)) <= {0, 1}
    assert traffic(meters, "online") == 0 and traffic(meters, "offline") == 64 * n


def test_verify_halves_refuse_a_hash_folded_in_between():
    """``verify_start`` fixes the expected hashes; a check folded before ``verify_finish``
    would never be compared, so it is refused."""
    from secinfer.errors import ConfigError
    from secinfer.net.channel import LocalHub
    from secinfer.protocols.astra.engine import AstraEngine

    class _Keys:
        pass
    eng = AstraEngine(LocalHub(["p0", "p1", "p2"])["p1"], "p1", _Keys(), "malicious")
    eng.expect_hash("p2", "x", np.ones(2, np.uint64))
    pending = eng.verify_start()
    assert [c for c, _ in pending["p2"]] == ["x"] and "p0" not in pending   # nothing due from p0
    eng.send_hash("p2", "late", np.ones(1, np.uint64))
    with pytest.raises(ConfigError, match="folded between"):
        eng.verify_finish(pending)
