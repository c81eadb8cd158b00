"""b = 16 end to end [SAFHIRE Table 2]: the finer-gadget ring rlwe-n11-q53-w11-128 is b = 16's
default, passes the server's set-up noise check where b = 12's ring (18-bit digits) is
refused, and the protocol equals the quantized oracle for every gamma (the 11-bit digits on
a small ring in process; the secure default ring through `secinfer run`)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from secinfer.crypto import he
from secinfer.errors import ConfigError
from secinfer.protocols.base import PartyJob
from secinfer.protocols.safhire.lwe import default_params, fast_available
from secinfer.protocols.safhire.protocol import NOISE_MARGIN_BITS, _config, _params, check_noise_margin, log_delta
from tests.safhire.helpers import options
from tests.safhire.qhelpers import digits
from tests.safhire.test_protocol import _check_rounds, _oracle

pytestmark = pytest.mark.skipif(not fast_available(), reason="b = 16's ring is the fast backend's")

B16 = "rlwe-n11-q53-w11-128"
B12 = "rlwe-n11-q53-w18-128"


def test_b16_default_ring():
    for gamma in (0, 1, 2):
        assert default_params(16, gamma) == B16
        assert default_params(12, gamma) == B12
        cfg = _config(PartyJob("server", "semi-honest", None, None, options={"b": 16, "gamma": gamma}))
        assert cfg["he_params"] == B16 and _params(cfg).security_bits == 128


@pytest.mark.parametrize("gamma", [0, 1, 2])
def test_set_up_noise_check_refuses_b12_ring_and_accepts_b16_ring_at_delta_2_31(gamma):
    """Delta = 2^31 is ResNet-20's at b = 16 (its worst-case accumulators leave no more):
    the 18-bit digits' noise (~2^28) is inside the 2^5 margin, the 11-bit digits' (~2^21.5)
    far below it."""
    ld = 31
    with pytest.raises(ConfigError, match="packing noise on this ring reaches"):
        check_noise_margin(he.get_params(B12), ld, gamma)
    n = check_noise_margin(he.get_params(B16), ld, gamma)
    assert n["exact"] and n["log2_max_abs"] < ld - NOISE_MARGIN_BITS - 2


@pytest.mark.parametrize("gamma", [0, 1, 2])
def test_digits_cnn_b16_with_11_bit_digits_equals_oracle_every_round(gamma):
    g, x, _ = digits("digits-cnn")
    opts = options(b=16, gamma=gamma, trace=1, he_params="rlwe-n9-w11-insecure")
    res = _check_rounds(g, x[310:311], opts)
    info = res["server"].info
    assert info["he_params"] == "rlwe-n9-w11-insecure" and info["b"] == 16
    assert info["setup_noise_log2_max"] < info["log_delta"] - NOISE_MARGIN_BITS


def test_cli_b16_on_the_secure_default_ring_equals_the_oracle(tmp_path):
    """`secinfer run -p safhire -o b=16` (two processes over TCP, N = 2^11, 128-bit)."""
    g, x, _ = digits("digits-cnn")
    one = tmp_path / "one.npy"
    np.save(one, x[311:312])
    p = subprocess.run([sys.executable, "-m", "secinfer.cli.main", "run", "-p", "safhire", "-m",
                        "bundled:digits-cnn", "-i", str(one), "--option", "b=16", "--option", "gamma=2",
                        "--json"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    srv, cli = out["info"]["server"], out["info"]["client"]
    assert srv["he_params"] == B16 and srv["b"] == 16
    qm = _oracle(g, {"b": 16})
    assert cli["log_delta"] == log_delta(qm, he.get_params(B16), 2)
    np.testing.assert_array_equal(np.asarray(cli["finals"][0]), qm.run_int(qm.quantize_input(x[311:312])[0]))
    np.testing.assert_array_equal(np.asarray(out["output"]), qm.run(x[311:312]))
