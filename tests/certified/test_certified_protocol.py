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
    want = usecases.reference({"usecase": "sum"}, u.quantize(x)) / 256
    got = res["provider"].info["result"]
    assert abs(got - want) <= 1e-3 * abs(want)
    assert res["data_source"].output[0] == got
    assert abs(res["user"].info["result"] - got) < 1e-2
