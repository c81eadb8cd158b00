"""One adversarial test per malicious-security check: honest parties abort, nobody gets output.

Every deviation is made from outside the protocol code (tests/adversary.py): the corrupt
party's endpoint rewrites a frame it sends, or one of its engine's methods is patched.
Each test asserts that the deviation happened (``fired``) and, where it is marked
``covers_check``, that this check is the one that fired (so it fails when that check
alone is disabled: ``pytest --disable-check <name> tests/astra``)."""

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_diabetes
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from adversary import Corrupt, flip, flip_all, flip_at, match
from astra_helpers import run_protocol
from secinfer.errors import ProtocolAbort
from secinfer.protocols.astra.engine import AstraEngine

ROLES = ("p0", "p1", "p2", "client", "model_owner")


@pytest.fixture(scope="module")
def models():
    x, y = load_breast_cancer(return_X_y=True)
    clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)).fit(x[:300], y[:300])
    xd, yd = load_diabetes(return_X_y=True)
    reg = LinearRegression().fit(xd[:300], yd[:300])
    return {"clf": (clf, x[300:306]), "reg": (reg, xd[300:306])}


def _plus_one(orig, eng, *args, **kw):
    return eng.R.add(orig(eng, *args, **kw), 1)


def attack(step: str, party: str, monkeypatch, paper: bool = False) -> Corrupt:
    """The corrupt ``party``'s deviation ``step``, applied from outside."""
    adv = Corrupt(party)
    send = {
        "wrong_gamma": (match(prefix="astra/mul/", suffix="/g2"), flip_all, 0),    # P0's gamma share [Fig. 8]
        "wrong_chi": (match(prefix="astra/mul/", suffix="/chi"), flip_all, 0),     # an evaluator's chi share
        "wrong_mz": (match(prefix="astra/mul/", suffix="/mz"), flip_all, 0),       # m_z share to the other evaluator
        "inconsistent_mx": (match(prefix="astra/sh/", peer="p2"), flip_all, 0),    # m_x differs at P1, P2
        "pad_inconsistent": (match(prefix="astra/sh/pad", peer="p2"), flip_all, 0),
        "wrong_out_share": (match(prefix="astra/out/", suffix="/l1"), flip_all, 0),  # a wrong share towards C
        "wrong_rec_share": (match(prefix="astra/rec/", suffix="/l2"), flip_all, 0),  # inside Pi_prc's Pi_rec^m
        "bad_triple": (match(prefix="astra/trip/", suffix="/g2"), flip_all, 0),    # every optimistic triple bad
        # one triple bad, and it survives the cut: only the bucket sacrifice can catch it
        "bad_bucket_triple": (match(prefix="astra/trip/", suffix="/g2"), flip_at(0), 0),
        "bad_coin": (match(prefix="astra/coin/", suffix="/o"), flip, 0),            # opening != commitment
        "bad_gc": (match(prefix="astra/bx/", suffix="/gc"), flip, 0),              # a garbler's inconsistent GC
        "bad_key": (match(prefix="astra/bx/", suffix="/open"), flip, 0),           # an inconsistent opened label
        "bad_share_bit": (match(prefix="astra/bx/", suffix="/mr1"), flip_all, 0),  # m_r1 differs from P0's hash
        "wrong_mstar_y": (match(prefix="astra/mul/", suffix="/mstar_y"), flip_all, 0),  # m*_w offline
        "frec_bad_commit": (match(prefix="astra/frec/", suffix="/c1"), flip, 0),   # P0's commitment to P2
        "frec_bad_cm": (match(prefix="astra/frec/", suffix="/cm"), flip, 0),       # an evaluator's H(m_y) to P0
    }
    if step in send:
        pred, how, i = send[step]
        adv.on_send(pred, how, i)
    elif step == "wrong_y":     # P2's y: to P1 (paper reveal) or with its label hash to C (direct)
        adv.on_send(match(prefix="astra/bx/", suffix="/y"), flip_all, 0)
        if not paper:
            adv.on_send(match(prefix="astra/out/", suffix="/l2"), flip, 2)
    elif step == "split_key":   # a different key to one receiver of a three-holder key [2.2]
        adv.on_send(match(prefix="astra/key/P", peer="p2") if party == "p0" else
                    match(prefix="astra/key/C1", peer="p1"), flip)
    elif step == "consistent_mz":   # both evaluators end with m_z + 1
        adv.patch(monkeypatch, AstraEngine, "_mz_share", _plus_one)
    elif step == "wrong_mstar":     # m*_x + 1 (P1 sends it, P2 hashes or pads it)
        adv.patch(monkeypatch, AstraEngine, "_mstar_x", _plus_one)
    else:
        raise KeyError(step)
    return adv


# (model, corrupt party, step, checks that may fire first at an honest party, the check covered)
ATTACKS = [
    ("reg", "p0", "wrong_gamma", {"prc"}, "prc"),
    ("reg", "p1", "wrong_chi", {"prc"}, None),
    ("reg", "p2", "wrong_mz", {"mul-mz", "rec-consistency"}, None),
    ("reg", "p1", "consistent_mz", {"mul-mz"}, "mul-mz"),
    ("reg", "client", "inconsistent_mx", {"sh-consistency", "mul-mstar"}, None),
    ("reg", "model_owner", "inconsistent_mx", {"sh-consistency", "mul-mstar"}, None),
    ("reg", "p0", "wrong_out_share", {"rec-consistency"}, "rec-consistency"),
    ("reg", "p0", "wrong_rec_share", {"rec-consistency"}, None),
    ("reg", "p0", "bad_triple", {"trip-cut"}, "trip-cut"),
    ("reg", "p0", "bad_bucket_triple", {"trip-bucket"}, "trip-bucket"),
    ("reg", "p1", "bad_coin", {"coin-toss"}, "coin-toss"),
    ("clf", "p1", "bad_gc", {"gc-consistency"}, "gc-consistency"),
    ("clf", "p0", "bad_key", {"gc-key"}, "gc-key"),
    ("clf", "p1", "bad_share_bit", {"bitext-share"}, "bitext-share"),
    ("clf", "p2", "wrong_y", {"bitext-y"}, "bitext-y"),
    ("clf", "p0", "wrong_out_share", {"rec-consistency"}, None),
    ("clf", "p1", "wrong_mz", {"mul-mz", "gc-key"}, None),
    ("clf", "p1", "consistent_mz", {"mul-mz"}, None),
    ("reg", "p1", "wrong_mstar", {"mul-mz"}, None),
    ("reg", "p2", "wrong_mstar", {"mul-mz"}, None),
    ("clf", "p1", "wrong_mstar", {"mul-mstar"}, "mul-mstar"),
    ("reg", "p1", "wrong_mstar_y", {"mul-mstar"}, None),
    ("reg", "p0", "split_key", {"key-setup"}, "key-setup"),
    ("reg", "client", "split_key", {"key-setup"}, None),
]


def _params():
    out = []
    for a in ATTACKS:
        marks = [pytest.mark.covers_check("astra", a[4])] if a[4] else []
        out.append(pytest.param(*a[:4], marks=marks, id=f"{a[2]}-{a[1]}"))
    return out


def _honest_abort(res, party, checks):
    honest = [p for p in ROLES if p != party]
    fired = set()
    for p in honest:
        assert isinstance(res[p], ProtocolAbort), (p, res[p])   # abort, and nothing else
        fired.add(res[p].check)
    assert fired & checks, fired
    return fired


@pytest.mark.parametrize("kind,party,step,checks", _params())
def test_attack_makes_honest_parties_abort(models, monkeypatch, kind, party, step, checks):
    est, x = models[kind]
    adv = attack(step, party, monkeypatch)
    res, _ = run_protocol(est, x, "malicious", adversary=adv)
    assert adv.fired, "the deviation never happened"
    _honest_abort(res, party, checks)
    if party != "client":
        assert isinstance(res["client"], ProtocolAbort)   # the client gets no output


def test_a_bad_triple_that_survives_the_cut_is_caught_by_its_bucket(models, monkeypatch):
    """The corrupted triple is not among the opened ones, and the check that fires is the
    bucket sacrifice of Pi_trip (not the cut, not Pi_prc of the products)."""
    est, x = models["reg"]
    adv = attack("bad_bucket_triple", "p0", monkeypatch)
    res, _ = run_protocol(est, x, "malicious", adversary=adv)
    assert {res[p].check for p in ("p1", "p2")} == {"trip-bucket"}


def test_a_shifted_comparison_never_reaches_the_client(models, monkeypatch):
    """A corrupt P1 that makes both evaluators hold m_z + 1 (consistent) would, if P2 revealed
    the comparison's y before the mul-mz check, give a colluding client msb(a + e) for a
    chosen e (a binary search on the decision value). P2 (honest) must abort on mul-mz
    itself, before it sends y: had it sent y, the client's check would have fired first and
    P2 would end with the client's relayed abort instead."""
    est, x = models["clf"]
    adv = attack("consistent_mz", "p1", monkeypatch)
    res, _ = run_protocol(est, x, "malicious", adversary=adv)
    assert adv.fired
    assert isinstance(res["p2"], ProtocolAbort) and res["p2"].check == "mul-mz"


@pytest.mark.parametrize("party,step,checks", [("p1", "bad_gc", {"gc-consistency"}), ("p0", "bad_key", {"gc-key"}),
                                                ("p2", "wrong_y", {"bitext-y"}),
                                                ("p0", "wrong_out_share", {"rec-consistency"})])
def test_classification_attacks_abort_with_the_papers_reveal(models, monkeypatch, party, step, checks):
    """The same checks with ``reveal="paper"`` (P1 checks y; verify after the comparison)."""
    est, x = models["clf"]
    adv = attack(step, party, monkeypatch, paper=True)
    res, _ = run_protocol(est, x, "malicious", {"reveal": "paper"}, adversary=adv)
    assert adv.fired
    _honest_abort(res, party, checks)


@pytest.mark.parametrize("kind", ["reg", "clf"])
def test_honest_malicious_run_does_not_abort(models, kind):
    est, x = models[kind]
    res, _ = run_protocol(est, x, "malicious")
    assert not any(isinstance(v, BaseException) for v in res.values())
    if kind == "clf":
        assert np.array_equal(res["client"].output[:, 0], est.predict(x))
    else:
        assert np.max(np.abs(res["client"].output[:, 0] - est.predict(x))) < 0.5
