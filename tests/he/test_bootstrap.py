"""CKKS bootstrapping and Chebyshev polynomial evaluation (the fully encrypted baseline's
HE pieces) on the insecure test ring, against numpy references; and the baseline engine on
a tiny ResNet against the float model and its own cleartext simulation."""

import numpy as np
import pytest

from secinfer.crypto import he
from secinfer.crypto.he import bootstrap as hb
from secinfer.crypto.he.errors import HEArgumentError

pytestmark = pytest.mark.slow

P_NAME = "ckks-boot-n12-insecure"


@pytest.fixture(scope="module")
def boot():
    P = he.get_params(P_NAME)
    kp = P.keygen()
    bt = hb.Bootstrapper(P, kp.sk)
    evk = P.gen_eval_keys(kp.sk, relin=True)
    ev = he.Evaluator(P, evk)
    yield P, kp, bt, ev
    for o in (ev, evk, bt):
        o.close()
    kp.close()


def test_bootstrap_refreshes_level_and_keeps_values(boot):
    P, kp, bt, _ = boot
    x = np.random.default_rng(3).uniform(-1, 1, P.max_slots)
    with P.encrypt(x, kp.pk, log_slots=P.log_max_slots, level=0) as ct:
        assert ct.level == 0
        with bt.bootstrap(ct) as fresh:
            assert fresh.level == bt.output_level > 0
            got = P.decrypt_decode(fresh, kp.sk).real
    assert np.abs(got - x).max() < 1e-5


def test_poly_eval_matches_numpy_chebyshev(boot):
    P, kp, _, ev = boot
    a, b = -3.0, 3.0
    co = hb.chebyshev(lambda v: np.maximum(v, 0), 15, a, b)
    x = np.random.default_rng(4).uniform(a, b, P.max_slots)
    with P.encrypt(x, kp.pk, log_slots=P.log_max_slots) as ct:
        with hb.poly_eval(ev, ct, co, a, b) as out:
            assert out.level == ct.level - hb.poly_depth(15)
            got = P.decrypt_decode(out, kp.sk).real
    want = hb.cheb_value(co, a, b, x)
    assert np.abs(got - want).max() < 1e-5
    # and the interpolant is a ReLU approximation, not something else
    assert np.abs(want - np.maximum(x, 0)).max() < 0.2


def test_poly_eval_refuses_too_few_levels(boot):
    P, kp, _, ev = boot
    co = hb.chebyshev(np.tanh, 63, -1, 1)
    with P.encrypt(np.zeros(4), kp.pk, level=2) as ct:
        with pytest.raises(HEArgumentError, match="needs"):
            hb.poly_eval(ev, ct, co, -1, 1)


def test_bootstrapper_refuses_non_bootstrappable_set():
    P = he.get_params("ckks-n12-insecure")
    with P.keygen() as kp:
        with pytest.raises(HEArgumentError, match="not bootstrappable"):
            hb.Bootstrapper(P, kp.sk)


def _tiny_resnet():
    from secinfer.ir import zoo
    from secinfer.ir.onnx_import import load_model

    net = zoo._Net("tiny-resnet", 0, {})
    x_shape, out, out_shape = zoo._resnet(net, 1, [1, 1], [4, 8], "cifar", 8, 3, fold_bn=True)
    return load_model(net.finish(x_shape, out, out_shape).SerializeToString())


@pytest.mark.timeout(900)     # key generation for every chunk's rotations: minutes on a loaded machine
@pytest.mark.parametrize("mode,params_name", [("lattigo", P_NAME), ("reencrypt-standin", P_NAME),
                                              ("lattigo", "ckks-boot-n12-dense-insecure")])
def test_baseline_engine_tiny_resnet_matches_its_simulation_and_float(mode, params_name):
    from secinfer.bench.ckks_baseline import Engine, simulate

    g = _tiny_resnet()
    x = np.random.default_rng(5).standard_normal((1, 3, 8, 8)).astype(np.float32)
    # max_diagonals=32: the 4->4 and 8->8 convolutions (63 and 135 diagonals) are cut into chunks
    # the dense set (the N = 2^16 run's shape): DFT matrices on demand, rotation keys dropped
    # before every bootstrap
    dense = "dense" in params_name
    eng = Engine(g, params_name=params_name, degree=15, log=lambda *_: None, bootstrap=mode,
                 max_diagonals=32, free_keys_before_bootstrap=dense)
    try:
        res = eng.run(x)
        sim = simulate(g, x, eng.bounds, 15).reshape(-1)
    finally:
        eng.close()
    assert res["output"] == g.outputs[0].name and res["got"].shape == (3,)
    # the encrypted run equals the cleartext model of the same circuit to CKKS precision
    assert np.abs(res["got"] - sim).max() < 1e-3 * max(1.0, np.abs(sim).max())
    # and the approximation stays close to the float network
    assert np.abs(res["got"] - res["float"]).max() < 0.25 * max(1.0, np.abs(res["float"]).max())
    key = "bootstrap" if mode == "lattigo" else "bootstrap_standin"
    assert res["relus"] == 5 and eng.costs.ops[key][0] == 5
    if dense:
        assert eng.boot.dft_on_demand and eng.boot.dft_encode_s > 0
        # keys were dropped before each bootstrap and made again: more key sets than convolutions' kinds
        assert eng.costs.ops["keygen_rot"][0] > 0
