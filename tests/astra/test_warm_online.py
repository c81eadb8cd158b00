"""Option ``warm_online`` (``protocols/astra/direct.py``: ``warm_server`` / ``warm_client``):
the dry run of each party's online computation before its "ready" changes nothing any party
sees or outputs. With it on and off (same seeds), every party sends the same messages (peer,
tag, bytes: its view is the others' messages, so no key stream or PRG draw moved), the
meters count the same bytes per phase, tag and direction, and the outputs are equal to the
fixed-point oracle; the dry runs happen only when it is on; a bad value is a typed error."""

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_diabetes
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from astra_helpers import run_protocol
from secinfer.arith.fixed import FX64
from secinfer.errors import ProtocolError
from secinfer.protocols.astra import direct
from secinfer.protocols.rep3 import linear as mdl
from recording_ep import RecordingEndpoint  # tests/ helper


class _Recorder:
    """Wraps every role's endpoint; records each party's sent messages in order."""

    def __init__(self) -> None:
        self.sent = {}

    def wrap(self, role, ep):
        return RecordingEndpoint(ep, self.sent.setdefault(role, []))


def _model(task):
    if task == "regression":
        x, y = load_diabetes(return_X_y=True)
        return LinearRegression().fit(x[:300], y[:300]), x[300:303]
    x, y = load_breast_cancer(return_X_y=True)
    est = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)).fit(x[:450], y[:450])
    return est, x[450:455]


def _run(est, q, warm, monkeypatch):
    calls = []
    for name in ("warm_server", "warm_client"):
        f = getattr(direct, name)
        monkeypatch.setattr(direct, name, lambda *a, _f=f, _n=name: (calls.append(_n), _f(*a))[1])
    rec = _Recorder()
    res, meters = run_protocol(est, q, "semi-honest", options={"warm_online": warm}, seed=4, adversary=rec)
    for v in res.values():
        if isinstance(v, BaseException):
            raise v
    counts = {r: {k: (c.payload, c.messages) for k, c in m.counters.items()} for r, m in meters.items()}
    return res["client"], rec.sent, counts, sorted(calls)


@pytest.mark.parametrize("task", ["regression", "classifier"])
def test_warm_online_changes_no_message_meter_or_output(task, monkeypatch):
    est, q = _model(task)
    on = _run(est, q, True, monkeypatch)
    off = _run(est, q, False, monkeypatch)
    # the dry runs happen (client and every party with an online step) only when on
    want = ["warm_client", "warm_server", "warm_server"] + (["warm_server"] if task == "classifier" else [])
    assert on[3] == want and off[3] == []
    assert on[1] == off[1]                     # every party's messages, in order, byte for byte
    assert on[2] == off[2]                     # the meters
    assert np.array_equal(on[0].output_ring, off[0].output_ring)
    lm = mdl.resolve_wfrac(mdl.to_linear(est), FX64)
    want_y = mdl.oracle(lm, q, FX64)
    if task == "regression":
        assert np.array_equal(on[0].output_ring, want_y)
    else:
        assert np.array_equal(on[0].output_ring[:, 0].astype(np.int64), want_y[:, 0])


def test_warm_online_bad_value_is_typed():
    est, q = _model("regression")
    res, _ = run_protocol(est, q, "semi-honest", options={"warm_online": "yes"}, timeout=5)
    assert isinstance(res["client"], ProtocolError) and "warm_online" in str(res["client"])
