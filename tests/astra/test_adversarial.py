"""One adversarial test per malicious-security check: honest parties abort, nobody gets output."""

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_diabetes
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from astra_helpers import run_protocol
from secinfer.errors import ProtocolAbort


@pytest.fixture(scope="module")
def models():
    x, y = load_breast_cancer(return_X_y=True)
    clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)).fit(x[:300], y[:300])
    xd, yd = load_diabetes(return_X_y=True)
    reg = LinearRegression().fit(xd[:300], yd[:300])
    return {"clf": (clf, x[300:306]), "reg": (reg, xd[300:306])}


ATTACKS = [
    # (model, corrupt party, step, checks that may fire first at an honest party)
    ("reg", "p0", "wrong_gamma", {"prc"}),                 # P0 shares a wrong gamma [Fig. 8, Lemma 4.3]
    ("reg", "p1", "wrong_chi", {"prc"}),                   # an evaluator sends a wrong chi share
    ("reg", "p2", "wrong_mz", {"mul-mz", "rec-consistency"}),  # an evaluator sends a wrong m_z share
    ("reg", "p1", "consistent_mz", {"mul-mz"}),            # ... and keeps its own m_z in step with it
    ("reg", "client", "inconsistent_mx", {"sh-consistency", "mul-mstar"}),  # m_x differs at P1, P2
    ("reg", "model_owner", "inconsistent_mx", {"sh-consistency", "mul-mstar"}),
    ("reg", "p0", "wrong_out_share", {"rec-consistency"}),  # a wrong share in reconstruction
    ("reg", "p0", "wrong_rec_share", {"rec-consistency"}),  # ... inside Pi_prc's Pi_rec^m
    ("reg", "p0", "bad_triple", {"trip-cut", "trip-bucket"}),  # a bad triple inside Pi_trip
    ("clf", "p1", "bad_gc", {"gc-consistency"}),           # a garbler sends an inconsistent GC
    ("clf", "p0", "bad_key", {"gc-key"}),                  # ... or an inconsistent key
    ("clf", "p2", "wrong_y", {"bitext-y"}),                # a wrong y from P2 in BitExt (the client checks it)
    ("clf", "p0", "wrong_out_share", {"rec-consistency"}),  # a wrong share of the class bit
    ("clf", "p1", "wrong_mz", {"mul-mz", "gc-key"}),       # P2 holds a wrong m_a: P1's labels fail its check
    ("clf", "p1", "consistent_mz", {"mul-mz"}),            # both hold m_z + 1: P2 checks before the comparison's output
    ("reg", "p1", "wrong_mstar", {"mul-mz"}),              # P1 sends P0 a wrong m*_x [Fig. 8]: P0's pad is off
    ("reg", "p2", "wrong_mstar", {"mul-mz"}),              # P2 pads with a wrong m*_x (receiver-checked)
    ("clf", "p1", "wrong_mstar", {"mul-mstar"}),
    ("reg", "p1", "wrong_mstar_y", {"mul-mstar"}),         # ... a wrong m*_w (offline, receiver-checked)
    ("reg", "p0", "split_key", {"key-setup"}),             # different k_P to P1 and P2 [2.2]
    ("reg", "client", "split_key", {"key-setup"}),         # different owner keys
]


@pytest.mark.parametrize("kind,party,step,checks", ATTACKS, ids=[a[2] + "-" + a[1] for a in ATTACKS])
def test_attack_makes_honest_parties_abort(models, kind, party, step, checks):
    est, x = models[kind]
    res, _ = run_protocol(est, x, "malicious", {"attack": {"party": party, "step": step}})
    honest = [p for p in ("p0", "p1", "p2", "client", "model_owner") if p != party]
    fired = set()
    for p in honest:
        assert isinstance(res[p], ProtocolAbort), (p, res[p])   # abort, and nothing else
        fired.add(res[p].check)
    assert fired & checks, fired
    if party != "client":
        assert isinstance(res["client"], ProtocolAbort)   # the client gets no output


def test_a_shifted_comparison_never_reaches_the_client(models):
    """A corrupt P1 that makes both evaluators hold m_z + 1 (consistent) would, if P2 revealed
    the comparison's y before the mul-mz check, give a colluding client msb(a + e) for a
    chosen e (a binary search on the decision value). P2 (honest) must abort on mul-mz
    itself, before it sends y: had it sent y, the client's check would have fired first and
    P2 would end with the client's relayed abort instead."""
    est, x = models["clf"]
    res, _ = run_protocol(est, x, "malicious", {"attack": {"party": "p1", "step": "consistent_mz"}})
    assert isinstance(res["p2"], ProtocolAbort) and res["p2"].check == "mul-mz"


@pytest.mark.parametrize("party,step,checks", [("p1", "bad_gc", {"gc-consistency"}), ("p0", "bad_key", {"gc-key"}),
                                                ("p2", "wrong_y", {"bitext-y"}),
                                                ("p0", "wrong_out_share", {"rec-consistency"})])
def test_classification_attacks_abort_with_the_papers_reveal(models, party, step, checks):
    """The same checks with ``reveal="paper"`` (P1 checks y; verify after the comparison)."""
    est, x = models["clf"]
    res, _ = run_protocol(est, x, "malicious", {"attack": {"party": party, "step": step}, "reveal": "paper"})
    honest = [p for p in ("p0", "p1", "p2", "client", "model_owner") if p != party]
    assert all(isinstance(res[p], ProtocolAbort) for p in honest), res
    assert {res[p].check for p in honest} & checks


@pytest.mark.parametrize("kind", ["reg", "clf"])
def test_honest_malicious_run_does_not_abort(models, kind):
    est, x = models[kind]
    res, _ = run_protocol(est, x, "malicious", {"attack": {}})
    assert not any(isinstance(v, BaseException) for v in res.values())
    if kind == "clf":
        assert np.array_equal(res["client"].output[:, 0], est.predict(x))
    else:
        assert np.max(np.abs(res["client"].output[:, 0] - est.predict(x))) < 0.5
