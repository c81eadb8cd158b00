"""The ABY3 baseline's malicious checks: a deviation made from outside (tests/adversary.py)
makes every honest party abort with the check it covers."""

import numpy as np
import pytest
from sklearn.datasets import load_diabetes
from sklearn.linear_model import LinearRegression

from adversary import Corrupt, flip, flip_all, flip_at, match
from secinfer.errors import ProtocolAbort
from secinfer.protocols.aby3.engine import Rep3Engine
from test_aby3_bench import _run


@pytest.fixture(scope="module")
def reg():
    xd, yd = load_diabetes(return_X_y=True)
    return LinearRegression().fit(xd[:300], yd[:300]), xd[300:303]


def _reshare_wrong(triples: bool, how):
    """The corrupt party adds an error to its reshared component (the copy it keeps and the
    one it sends agree): in the triples' optimistic products, or in the online products."""
    def fn(orig, eng, z, label):
        if ("/trip" in label) == triples:
            z = how(np.asarray(z, np.uint64))
        return orig(eng, z, label)
    return fn


def _attack(step, monkeypatch):
    if step == "wrong_z":
        return Corrupt("p1").patch(monkeypatch, Rep3Engine, "_reshare", _reshare_wrong(False, flip_all))
    if step == "bad_triples":
        return Corrupt("p1").patch(monkeypatch, Rep3Engine, "_reshare", _reshare_wrong(True, flip_all))
    if step == "bad_bucket_triple":
        return Corrupt("p1").patch(monkeypatch, Rep3Engine, "_reshare", _reshare_wrong(True, flip_at(1)))
    if step == "bad_coin":
        return Corrupt("p2").on_send(match(prefix="astra/coin/", suffix="/o"), flip)
    if step == "wrong_open":
        return Corrupt("p2").on_send(match(prefix="rep3/open/"), flip_all)
    if step == "wrong_out":
        return Corrupt("p0").on_send(match(prefix="rep3/out/y", peer="client"), flip_all)
    if step == "inconsistent_x":
        return Corrupt("model_owner").on_send(match(prefix="rep3/in/W", peer="p2"), flip_all)
    if step == "split_key":
        return Corrupt("p0").on_send(match(prefix="astra/key/P", peer="p2"), flip)
    raise KeyError(step)


CASES = [("wrong_z", "sacrifice"), ("bad_triples", "trip-cut"), ("bad_bucket_triple", "trip-bucket"),
         ("bad_coin", "coin-toss"), ("wrong_open", "rec-consistency"), ("wrong_out", "rec-consistency"),
         ("inconsistent_x", "sh-consistency"), ("split_key", "key-setup")]


@pytest.mark.parametrize("step,check", [pytest.param(s, c, id=s, marks=pytest.mark.covers_check("aby3", c))
                                        for s, c in CASES])
def test_aby3_deviation_aborts(reg, monkeypatch, step, check):
    est, x = reg
    adv = _attack(step, monkeypatch)
    res = _run("aby3", est, x, "malicious", adversary=adv)
    assert adv.fired, "the deviation never happened"
    honest = [p for p in ("p0", "p1", "p2", "client", "model_owner") if p != adv.party]
    for p in honest:
        assert isinstance(res[p], ProtocolAbort), (p, res[p])
    assert check in {res[p].check for p in honest}
