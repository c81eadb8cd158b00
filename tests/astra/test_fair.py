"""Fairness of Pi_fRec [ASTRA 4.3, Fig. 10]: all honest parties get the output, or none does."""

import numpy as np
import pytest
from sklearn.datasets import load_diabetes
from sklearn.linear_model import LinearRegression

from adversary import Corrupt, flip, flip_all, match
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
# the first frame of Pi_fRec's step that the stopping party would send or receive
STOP_AT = {("p0", "commit"): (match(prefix="astra/frec/", suffix="/cm"), "recv"),
           ("p0", "signal"): (match(prefix="astra/frec/", suffix="/sig"), "send"),
           ("p0", "open"): (match(prefix="astra/frec/", suffix="/o1"), "send"),
           ("p1", "commit"): (match(prefix="astra/frec/", suffix="/cm"), "send"),
           ("p2", "commit"): (match(prefix="astra/frec/", suffix="/cm"), "send"),
           ("p1", "forward"): (match(prefix="astra/frec/", suffix="/fwd"), "send"),
           ("p2", "forward"): (match(prefix="astra/frec/", suffix="/fwd"), "send"),
           ("p1", "open"): (match(prefix="astra/frec/", suffix="/o1"), "send"),
           ("p2", "open"): (match(prefix="astra/frec/", suffix="/o2"), "send")}


@pytest.mark.parametrize("party,step", STOPS, ids=[f"{p}-{s}" for p, s in STOPS])
def test_party_stopping_in_frec_is_all_or_none(reg, party, step):
    est, x = reg
    adv = Corrupt(party).crash_at(*STOP_AT[(party, step)])
    res, _ = run_protocol(est, x, "fair", timeout=10, adversary=adv)
    assert adv.fired and isinstance(res[party], BaseException)
    honest = [p for p in ("p0", "p1", "p2") if p != party]
    ok = _outcome(res, honest + ["client"])
    assert len(set(ok.values())) == 1, ok            # unanimity among the honest parties
    if ok["client"]:
        assert np.max(np.abs(res["client"].output[:, 0] - est.predict(x))) < 0.5
    else:
        assert all(isinstance(res[p], ProtocolAbort) for p in honest + ["client"])


def _split_signal() -> Corrupt:
    """A corrupt P0 that tells P1 "continue" and P2 "abort" (with a valid proof): it makes
    itself see different commitments of m_y (so it prepares both abort messages), replaces
    the one to P1 by "continue", and keeps its own abort to itself."""
    cont = lambda arrays: [np.zeros_like(a) for a in arrays]  # noqa: E731
    return (Corrupt("p0").on_recv(match(prefix="astra/frec/", suffix="/cm", peer="p2"), flip)
            .replace_send(match(prefix="astra/frec/", suffix="/sig", peer="p1"), cont).keep_abort_silent())


@pytest.mark.covers_check("astra", "frec-abort")
def test_corrupt_p0_split_signal_cannot_split_evaluators(reg):
    est, x = reg
    adv = _split_signal()
    res, _ = run_protocol(est, x, "fair", timeout=10, adversary=adv)
    assert adv.fired >= 2
    # P2 forwards the proof and both abort
    assert isinstance(res["p1"], ProtocolAbort) and isinstance(res["p2"], ProtocolAbort)
    assert res["p1"].check == res["p2"].check == "frec-abort"
    assert isinstance(res["client"], ProtocolAbort)


@pytest.mark.covers_check("astra", "fair-output")
def test_client_gets_no_output_when_the_servers_abort(reg):
    """No server delivers (they all aborted in Pi_fRec): the client's 2-of-3 vote aborts."""
    est, x = reg
    adv = _split_signal()
    res, _ = run_protocol(est, x, "fair", timeout=10, adversary=adv)
    assert isinstance(res["client"], ProtocolAbort) and res["client"].check == "fair-output"


@pytest.mark.covers_check("astra", "frec-commit")
def test_bad_offline_commitment_aborts(reg):
    est, x = reg
    adv = Corrupt("p0").on_send(match(prefix="astra/frec/", suffix="/c1"), flip)
    res, _ = run_protocol(est, x, "fair", timeout=10, adversary=adv)
    assert adv.fired
    assert isinstance(res["p2"], ProtocolAbort) and res["p2"].check == "frec-commit"
    assert isinstance(res["client"], ProtocolAbort)


@pytest.mark.covers_check("astra", "frec-commit-m")
def test_evaluators_committing_to_different_outputs_abort(reg):
    """A corrupt P1 commits to a wrong m_y: P0 sees two different commitments, aborts, and
    hands both evaluators the proof that it did."""
    est, x = reg
    adv = Corrupt("p1").on_send(match(prefix="astra/frec/", suffix="/cm"), flip)
    res, _ = run_protocol(est, x, "fair", timeout=10, adversary=adv)
    assert adv.fired
    assert isinstance(res["p0"], ProtocolAbort) and res["p0"].check == "frec-commit-m"
    assert isinstance(res["p2"], ProtocolAbort) and isinstance(res["client"], ProtocolAbort)


@pytest.mark.covers_check("astra", "frec-open")
def test_no_valid_opening_aborts(reg):
    """Beyond the threat model (two servers stop before their openings): P0 receives no
    opening of m_y that matches the commitment and must abort, not compute on nothing."""
    est, x = reg
    advs = [Corrupt(p).crash_at(match(prefix="astra/frec/", suffix="/om"), "send") for p in ("p1", "p2")]

    class Both:
        fired = 0

        def wrap(self, role, ep):
            for a in advs:
                ep = a.wrap(role, ep)
            return ep
    res, _ = run_protocol(est, x, "fair", timeout=10, adversary=Both())
    assert all(a.fired for a in advs)
    assert isinstance(res["p0"], ProtocolAbort) and res["p0"].check == "frec-open"


def test_fair_honest_run(reg):
    est, x = reg
    res, _ = run_protocol(est, x, "fair")
    assert not any(isinstance(v, BaseException) for v in res.values())
    assert np.max(np.abs(res["client"].output[:, 0] - est.predict(x))) < 0.5


@pytest.mark.covers_check("astra", "sh-consistency")
def test_fair_classification_checks_the_pads_input_consistency():
    """The client's pad is shared in the boolean ring (its own engine); its Pi_sh^m check
    must still be folded into the verify the servers run before Pi_fRec (a pad sent
    inconsistently to P1 and P2 makes every honest party abort)."""
    from sklearn.datasets import load_breast_cancer
    from sklearn.linear_model import LogisticRegression

    x, y = load_breast_cancer(return_X_y=True)
    est = LogisticRegression(max_iter=5000).fit(x[:300], y[:300])
    adv = Corrupt("client").on_send(match(prefix="astra/sh/pad", peer="p2"), flip_all)
    res, _ = run_protocol(est, x[300:304], "fair", timeout=10, adversary=adv)
    assert adv.fired
    for p in ("p0", "p1", "p2", "model_owner"):
        assert isinstance(res[p], ProtocolAbort), (p, res[p])
    assert {res[p].check for p in ("p1", "p2")} == {"sh-consistency"}
