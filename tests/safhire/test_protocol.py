"""SAFHIRE end to end on small rings: every round equals the quantized model exactly
[SAFHIRE Sec. 6.1], for b = 8, 12, 16 and every extraction level gamma."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import pytest

from secinfer.errors import ConfigError, InsecureParametersError
from secinfer.protocols.safhire.lwe import fast_available
from secinfer.protocols.safhire.protocol import ServerRound, _config, quantized_model
from secinfer.protocols.base import PartyJob
from tests.safhire.helpers import options, run, server_seed
from tests.safhire.qhelpers import digits, tiny_resnet


def _oracle(graph, opts):
    job = PartyJob("server", "semi-honest", None, None, options=opts)
    cfg = _config(job)
    return quantized_model(graph, cfg, opts)


def _check_rounds(graph, x, opts):
    res = run(graph, x, opts)
    for role in ("server", "client"):
        assert not isinstance(res[role], BaseException), res[role]
    cl = res["client"]
    qm = _oracle(graph, opts)
    core = ServerRound(qm, None, 0, True)
    seed = server_seed()
    R = len(qm.rounds)
    xq = qm.quantize_input(x)
    assert len(cl.info["trace"]) == R * len(xq)
    for s, v0 in enumerate(xq):
        tr: list = []
        final = qm.run_int(v0, tr)
        for r in range(R):
            got = np.asarray(cl.info["trace"][s * R + r])
            rows = core.out_rows(seed, s, r)
            assert np.array_equal(got, tr[r][rows]), f"sample {s} round {r} differs from the oracle"
        assert np.array_equal(cl.info["finals"][s], final)
        assert np.array_equal(cl.output[s], qm.finish(final))
    return res


@pytest.mark.parametrize("gamma", [0, 1, 2])
@pytest.mark.parametrize("b", [8, 12, 16])
def test_digits_cnn_every_round_equals_oracle(b, gamma):
    g, x, _ = digits("digits-cnn")
    opts = options(b=b, gamma=gamma, trace=1)
    if gamma and not fast_available():
        with pytest.raises(ConfigError, match="partial trace"):
            _config(PartyJob("client", "semi-honest", None, None, options=opts))
        pytest.skip("gamma > 0 needs the HE core's partial trace extraction (secinfer.crypto.he.packing)")
    _check_rounds(g, x[300:302] if b == 12 else x[310:311], opts)


def test_random_inputs_tiny_resnet_max_pool_residual_exact():
    g = tiny_resnet()
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, (1, 3, 8, 8))
    res = _check_rounds(g, x, options(b=16, trace=1))
    assert res["client"].info["rounds"] == 7          # 6 + the pooling round (issue 18)


def test_unshuffled_view_differs_from_client_view():
    """With shuffling, what the client decrypts in a middle round is a permutation of the
    true outputs, not the true order."""
    g, x, _ = digits("digits-cnn")
    opts = options(b=12, trace=1)
    res = run(g, x[300:301], opts)
    qm = _oracle(g, opts)
    tr: list = []
    qm.run_int(qm.quantize_input(x[300:301])[0], tr)
    got = np.asarray(res["client"].info["trace"][0])
    assert not np.array_equal(got, tr[0])
    assert np.array_equal(np.sort(got), np.sort(tr[0]))


def test_refusals():
    with pytest.raises(ConfigError):
        _config(PartyJob("client", "semi-honest", None, None, options={"b": 10}))
    with pytest.raises(ConfigError):
        _config(PartyJob("client", "semi-honest", None, None, options={"gamma": 3}))
    g, x, _ = digits("digits-cnn")
    res = run(g, x[:1], {"he_params": "ckks-n10-insecure"})
    assert isinstance(res["server"], InsecureParametersError) or isinstance(res["client"], InsecureParametersError)


def test_shuffle_off_is_announced_as_insecure(capsys):
    _config(PartyJob("client", "semi-honest", None, None, options={"shuffle": "off"}))
    assert "INSECURE" in capsys.readouterr().err


def test_client_refuses_decryptions_too_close_to_a_rounding_boundary(monkeypatch):
    """With a Delta below the packing noise the client stops with a typed error instead of
    returning wrong integers."""
    from secinfer.protocols.safhire import lwe as L
    from secinfer.protocols.safhire import protocol as proto

    monkeypatch.setattr(proto, "log_delta", lambda qm, params, gamma=0: 2)
    g, x, _ = digits("digits-mlp")
    res = run(g, x[:1], options(b=8))             # the server's own noise measurement refuses
    assert isinstance(res["server"], ConfigError) and "packing noise" in str(res["server"])
    monkeypatch.setattr(proto, "check_noise_margin", lambda *a, **k: {"log2_max_abs": None})
    res = run(g, x[:1], options(b=8))             # without it, the client's check does
    assert isinstance(res["client"], L.DecryptionMarginError), res["client"]


def test_every_round_is_marked_for_the_live_progress_line(recorded_marks):
    """Issue #21: both parties mark each round as it starts ("round k/n op"), in order."""
    seen = recorded_marks
    g = tiny_resnet()
    x = np.random.default_rng(6).uniform(-1, 1, (2, 3, 8, 8))
    res = run(g, x, options(b=16))
    assert not isinstance(res["client"], BaseException), res["client"]
    R = res["client"].info["rounds"]
    for me in ("server", "client"):
        names = [n for m, n in seen if m == me and n.startswith("round ")]
        want = [f"round {r}/{R} " for _ in range(2) for r in range(1, R + 1)]
        assert [n[:len(w)] for n, w in zip(names, want)] == want and len(names) == 2 * R, (me, names)
        assert names[0].endswith("linear+relu sample 1/2") and names[-1].endswith("linear+output sample 2/2")


def test_qcache_keeps_the_quantized_model_and_keys_it_by_b(tmp_path):
    g = tiny_resnet()
    opts = options(b=16, qcache=str(tmp_path))
    cfg = _config(PartyJob("server", "semi-honest", None, None, options=opts))
    qm = quantized_model(g, cfg, opts)
    files = list(tmp_path.glob("safhire-q-*.npz"))
    assert len(files) == 1
    again = quantized_model(g, cfg, opts)
    x = np.random.default_rng(2).uniform(-1, 1, (2, 3, 8, 8))
    assert np.array_equal(qm.run(x), again.run(x)) and again is not qm
    opts12 = options(b=12, qcache=str(tmp_path))
    quantized_model(g, _config(PartyJob("server", "semi-honest", None, None, options=opts12)), opts12)
    assert len(list(tmp_path.glob("safhire-q-*.npz"))) == 2


def test_stored_quantized_model_round_trips_field_by_field(tmp_path):
    """The qcache's .npz (no pickle) gives back every field of the quantized model."""
    import dataclasses

    from secinfer.ir.quantize_store import load_quantized, save_quantized

    g = tiny_resnet()
    opts = options(b=12)
    qm = quantized_model(g, _config(PartyJob("server", "semi-honest", None, None, options=opts)), opts)
    with open(tmp_path / "q.npz", "wb") as f:
        save_quantized(qm, f)
    back = load_quantized(tmp_path / "q.npz")

    def same(a, b):
        if sp.issparse(a):
            return sp.issparse(b) and a.shape == b.shape and (a != b).nnz == 0 and a.dtype == b.dtype
        if isinstance(a, np.ndarray):
            return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
        if isinstance(a, (list, tuple)):
            return len(a) == len(b) and all(same(u, v) for u, v in zip(a, b))
        if dataclasses.is_dataclass(a):
            return all(same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
        return a == b and type(a) is type(b) or (isinstance(a, tuple) and tuple(b) == a)

    assert same(qm, back)
