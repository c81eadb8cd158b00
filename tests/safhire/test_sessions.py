"""Session ids and round counters [SAFHIRE Sec. 3]: replayed, stale, skipped and foreign
messages are refused with typed errors; the session store and checkpoints (Sec. 4.6)."""

from __future__ import annotations

import numpy as np
import pytest

from secinfer.protocols.safhire import session as S
from tests.safhire.helpers import options, run
from tests.safhire.qhelpers import digits


class Tamper:
    """The honest client's endpoint, with its n-th "sh/x" message rewritten by ``fn``."""

    def __init__(self, ep, fn, nth: int) -> None:
        self._ep, self._fn, self._nth, self._seen = ep, fn, nth, []

    def __getattr__(self, name):
        return getattr(self._ep, name)

    def send(self, peer, tag, *arrays):
        if tag == "sh/x":
            self._seen.append([np.array(a, copy=True) for a in arrays])
            if len(self._seen) == self._nth:
                arrays = self._fn(self._seen)
        return self._ep.send(peer, tag, *arrays)


def _replay(seen):          # send the previous round's message again
    return seen[-2]


def _stale(seen):           # the message of two rounds ago
    return seen[-3]


def _skip(seen):
    a = [x.copy() for x in seen[-1]]
    a[0][0] += 1
    return a


def _foreign(seen):
    a = [x.copy() for x in seen[-1]]
    a[1][0] ^= 1
    return a


@pytest.mark.parametrize("fn,nth,err", [(_replay, 2, S.ReplayedRoundError),
                                        (_stale, 3, S.StaleRoundError),
                                        (_skip, 2, S.SkippedRoundError),
                                        (_foreign, 1, S.SessionMismatchError)])
def test_server_refuses_out_of_session_or_round(fn, nth, err):
    g, x, _ = digits("digits-mlp")
    res = run(g, x[:2], options(b=8), client_ep=lambda ep: Tamper(ep, fn, nth))
    assert isinstance(res["server"], err), res["server"]
    assert isinstance(res["server"], S.SafhireSessionError)
    assert isinstance(res["client"], BaseException)


def test_check_message_unit():
    sid = bytes(range(16))
    ok = S.header(5, 2, 0, S.X)
    S.check_message(ok, S.sid_array(sid), sid, 5, S.X, 2, "t")
    with pytest.raises(S.ReplayedRoundError):
        S.check_message(S.header(4, 1, 1, S.X), S.sid_array(sid), sid, 5, S.X, 2, "t")
    with pytest.raises(S.StaleRoundError):
        S.check_message(S.header(1, 0, 0, S.X), S.sid_array(sid), sid, 5, S.X, 2, "t")
    with pytest.raises(S.SkippedRoundError):
        S.check_message(S.header(7, 3, 0, S.X), S.sid_array(sid), sid, 5, S.X, 2, "t")
    with pytest.raises(S.SessionMismatchError):
        S.check_message(ok, S.sid_array(bytes(16)), sid, 5, S.X, 2, "t")
    from secinfer.errors import ProtocolError
    with pytest.raises(ProtocolError):            # round counter and labels disagree
        S.check_message(S.header(5, 0, 1, S.X), S.sid_array(sid), sid, 5, S.X, 2, "t")


def test_permutations_fresh_per_round_and_session():
    a = S.round_permutation(b"k" * 16, 0, 0, 50)
    assert sorted(a) == list(range(50))
    assert not np.array_equal(a, S.round_permutation(b"k" * 16, 0, 1, 50))
    assert not np.array_equal(a, S.round_permutation(b"k" * 16, 1, 0, 50))
    assert not np.array_equal(a, S.round_permutation(b"j" * 16, 0, 0, 50))
    assert np.array_equal(a, S.round_permutation(b"k" * 16, 0, 0, 50))


def test_store_round_trip_and_unknown_session(tmp_path):
    st = S.SessionStore(str(tmp_path))
    s = S.ServerSession(b"s" * 16, b"k" * 16, 4, 2, {0: (np.ones((2, 1), np.uint64), np.zeros((2, 1, 8), np.uint64))},
                        [np.arange(5, dtype=np.uint8)], {"b": 8})
    st.save(s)
    t = st.load(b"s" * 16)
    assert (t.next_t, t.samples, t.config, t.seed) == (4, 2, {"b": 8}, b"k" * 16)
    assert np.array_equal(t.saved[0][1], s.saved[0][1]) and np.array_equal(t.last_reply[0], np.arange(5))
    assert (tmp_path / f"{(b's' * 16).hex()}.npz").stat().st_mode & 0o077 == 0
    with pytest.raises(S.UnknownSessionError):
        st.load(b"u" * 16)
    with pytest.raises(S.UnknownSessionError):
        S.SessionStore(None).load(b"s" * 16)
