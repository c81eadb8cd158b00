"""Fairness of Pi_fRec [ASTRA 4.3, Fig. 10]: all honest parties get the output, or none does."""

import numpy as np
import pytest
from sklearn.datasets import load_diabetes
from sklearn.linear_model import LinearRegression

from astra_helpers import run_protocol
from secinfer.errors import ProtocolAbort


@pytest.fixture(scope="module")
def reg():
    x, y = load_diabetes(return_X_y=True)
    return LinearRegression().fit(x[:300], y[:300]), x[300:304]


def _outcome(res, honest):
    got = {p: not isinstance(res[p], BaseException) for p in honest}
    return got


STOPS = [(p, s) for p in ("p0", "p1", "p2") for s in ("commit", "open")] + [("p1", "forward"), ("p2", "forward"), ("p0", "signal")]


@pytest.mark.slow
@pytest.mark.parametrize("party,step", STOPS, ids=[f"{p}-{s}" for p, s in STOPS])
def test_party_stopping_in_frec_is_all_or_none(reg, party, step):
    est, x = reg
    res, _ = run_protocol(est, x, "fair", {"attack": {"party": party, "stop_at": step}}, timeout=10)
    assert isinstance(res[party], BaseException)
    honest = [p for p in ("p0", "p1", "p2") if p != party]
    ok = _outcome(res, honest + ["client"])
    assert len(set(ok.values())) == 1, ok            # unanimity among the honest parties
    if ok["client"]:
        assert np.max(np.abs(res["client"].output[:, 0] - est.predict(x))) < 0.5
    else:
        assert all(isinstance(res[p], ProtocolAbort) for p in honest + ["client"])


def test_corrupt_p0_split_signal_cannot_split_evaluators(reg):
    est, x = reg
    res, _ = run_protocol(est, x, "fair", {"attack": {"party": "p0", "signal": "split"}}, timeout=10)
    # P0 tells P1 "continue" and P2 "abort" (with a valid proof): P2 forwards the proof and both abort
    assert isinstance(res["p1"], ProtocolAbort) and isinstance(res["p2"], ProtocolAbort)
    assert res["p1"].check == res["p2"].check == "frec-abort"
    assert isinstance(res["client"], ProtocolAbort)


def test_bad_offline_commitment_aborts(reg):
    est, x = reg
    res, _ = run_protocol(est, x, "fair", {"attack": {"party": "p0", "step": "frec_bad_commit"}}, timeout=10)
    assert isinstance(res["p2"], ProtocolAbort) and isinstance(res["client"], ProtocolAbort)


def test_fair_honest_run(reg):
    est, x = reg
    res, _ = run_protocol(est, x, "fair")
    assert not any(isinstance(v, BaseException) for v in res.values())
    assert np.max(np.abs(res["client"].output[:, 0] - est.predict(x))) < 0.5


@pytest.mark.slow
def test_fair_classification_checks_the_pads_input_consistency():
    """The client's pad is shared in the boolean ring (its own engine); its Pi_sh^m check
    must still be folded into the verify the servers run before Pi_fRec (a pad sent
    inconsistently to P1 and P2 makes every honest party abort)."""
    from sklearn.datasets import load_breast_cancer
    from sklearn.linear_model import LogisticRegression

    x, y = load_breast_cancer(return_X_y=True)
    est = LogisticRegression(max_iter=5000).fit(x[:300], y[:300])
    res, _ = run_protocol(est, x[300:304], "fair",
                          {"attack": {"party": "client", "step": "inconsistent_mx", "label": "pad"}}, timeout=10)
    for p in ("p0", "p1", "p2", "model_owner"):
        assert isinstance(res[p], ProtocolAbort), (p, res[p])
    assert {res[p].check for p in ("p1", "p2")} == {"sh-consistency"}
