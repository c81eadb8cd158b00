"""CRISP as three OS processes over the authenticated socket transport (runtime launcher)."""

from __future__ import annotations

import numpy as np

from secinfer.arith.fixed import FX64
from secinfer.ir import bundled
from secinfer.ir.fixed_exec import run_fixed
from secinfer.ir.onnx_import import load_model


def test_digits_mlp_malicious_over_sockets():
    from secinfer.runtime.launcher import run_local

    X, _ = bundled.bundled_testset("digits-mlp")
    x = X[40:42]
    res = run_local(protocol="crisp", security="malicious", model_path=str(bundled.bundled_path("digits-mlp")),
                    input_array=x, network="none", fixed=None,
                    options={"he_params": "ckks-n12-wide-insecure", "allow_insecure_he": True}, timeout=300)
    g = load_model(bundled.bundled_path("digits-mlp"))
    np.testing.assert_array_equal(res.output_ring, run_fixed(g, x, FX64))
    assert res.rounds["online"] >= 6
    assert res.bytes_by_phase["offline"] > 0 and res.bytes_by_phase["online"] > 0


def test_cli_refuses_insecure_test_settings():
    """Protocol code honours test-only settings (insecure HE sets, the plain-insecure
    engine) only when asked for explicitly; the CLI never passes them."""
    import pytest

    from secinfer.cli.main import _parse_options
    from secinfer.errors import InsecureParametersError

    for opt in ("allow_insecure_he=true", "linear=plain-insecure",
                "he_params=ckks-n12-wide-insecure"):
        with pytest.raises(InsecureParametersError):
            _parse_options([opt], None)
    assert _parse_options(["linear=ckks"], None) == {"linear": "ckks"}
