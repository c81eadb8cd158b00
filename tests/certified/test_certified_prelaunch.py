"""The certified use cases' data ranges are refused before any party starts (the same
pre-launch validation as the other protocols: ProtocolSpec.value_limits through
secinfer.api.prepare), with an error naming the range."""

import numpy as np
import pytest

from secinfer.api import prepare
from secinfer.errors import FixedPointRangeError
from secinfer.protocols.certified.graphs import build


def _prepare(name, x, **kw):
    return prepare(build(name, x.size, kw.get("weights")), x.reshape(1, -1), protocol="certified")


def test_sum_in_range_is_accepted():
    x = np.array([0.25, 32.767, 1.5, 0.0])
    prep = _prepare("sum", x)
    try:
        assert prep.spec.name == "certified"
    finally:
        prep.model.cleanup()


@pytest.mark.parametrize("bad", [32.768, 40.0, -33.0])
def test_sum_reading_beyond_16_bits_is_refused_before_launch(bad):
    x = np.array([0.25, bad, 1.5, 0.0])
    with pytest.raises(FixedPointRangeError, match=r"index \(0, 1\).*\|x\| < 32\.77"):
        _prepare("sum", x)


def test_sum_limit_is_the_single_prime_headroom():
    """The sum is read from the constant coefficient, 2^15 per Wh at scale 2^25, N = 2^11:
    it must stay below q / 2 (the limit: 2^36 Wh, i.e. 2^36 / 1000 kWh)."""
    from secinfer.arith.fixed import get_config
    from secinfer.crypto.he.params import get_params
    from secinfer.ir.onnx_import import load_model
    from secinfer.protocols.certified.protocol import value_limits

    lim = value_limits(load_model(build("sum", 4)), get_config("fx64f13"), {})
    q = get_params("ckks-n11-q53-w4-128").q[0]
    assert lim["values"] == 2.0 ** 36 / 1000 and lim["values"] * 1000 * 2 ** 15 < q / 2


def test_snp_beyond_8_bits_is_refused_before_launch():
    x = np.array([0.0, 1.0, 2.0, 300.0])
    with pytest.raises(FixedPointRangeError, match=r"\|x\| < 127\.5"):
        _prepare("weighted-sum", x, weights=[0.1, 0.2, 0.3, 0.4])


def test_cli_leaves_no_generated_graph_behind(tmp_path):
    """`secinfer run -p certified -m sum` builds the use case's graph in a temporary folder:
    it is removed on every exit (here: a reading refused before launch)."""
    import os
    import subprocess
    import sys

    bad = tmp_path / "bad.npy"
    np.save(bad, np.array([0.25, 40.0, 1.5]))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    r = subprocess.run([sys.executable, "-m", "secinfer", "run", "-p", "certified", "-m", "sum", "-i", str(bad)],
                       env={**os.environ, "TMPDIR": str(tmp)}, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "outside the range" in r.stderr, r.stderr
    assert not list(tmp.glob("secinfer-certified-*")), list(tmp.iterdir())
