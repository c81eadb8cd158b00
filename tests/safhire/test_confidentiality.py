"""Model confidentiality [SAFHIRE Sec. 5]: the crafted-input attack recovers the integer
weights and biases exactly without shuffling (i), and only value multisets with output
shuffling (ii) and not even the columns with input and output shuffling (iii)."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from secinfer.crypto import he
from secinfer.ir import quantize as Q
from secinfer.protocols.safhire import attack as A
from secinfer.protocols.safhire import dp
from secinfer.protocols.safhire.protocol import log_delta
from tests.safhire.qhelpers import mlp3


@functools.lru_cache(maxsize=None)
def _qm():
    g = mlp3()
    return Q.quantize(g, 16, Q.calibration_inputs(g, None, 64))


def _oracle(r, shuffle):
    qm = _qm()
    P = he.get_params("ckks-n10-insecure")
    return A.RoundOracle(qm, P, log_delta(qm, P), r, shuffle, b"server-secret-sd")


@pytest.mark.parametrize("r", [0, 1])
def test_i_no_shuffling_recovers_weights_and_bias_exactly(r):
    qm = _qm()
    rd = qm.rounds[r]
    w, bias = A.attack_no_shuffle(_oracle(r, shuffle=False), rd.weights[0].shape[1])
    assert np.array_equal(w, rd.weights[0].toarray())
    assert np.array_equal(bias, rd.bias)


def test_ii_output_shuffling_gives_values_but_not_their_places():
    qm = _qm()
    rd = qm.rounds[0]                                   # first round: sigma_in = id
    wt = rd.weights[0].toarray()
    got = A.compare(wt, rd.bias, A.attack_shuffled(_oracle(0, shuffle=True), wt.shape[1]))
    print("(ii) attacker got:", got)
    assert not got["exact"]
    assert got["bias_as_multiset"]                     # the bias up to a permutation
    assert got["columns_as_multiset"] >= 0.75          # each column's values, as a multiset ...
    assert got["entries_in_place"] <= 0.5              # ... but not where they sit


def test_iii_input_and_output_shuffling_hide_even_the_columns():
    qm = _qm()
    rd = qm.rounds[1]                                   # middle round: sigma_in and sigma_out
    wt = rd.weights[0].toarray()
    got = A.compare(wt, rd.bias, A.attack_shuffled(_oracle(1, shuffle=True), wt.shape[1]))
    print("(iii) attacker got:", got)
    assert not got["exact"]
    assert got["columns_as_multiset"] < 0.6            # e_i hits a random column each query
    assert got["entries_in_place"] <= 0.5


def test_theorem2_bound():
    # the paper's regime: noise a good fraction of one unit, many outputs -> applicable
    r = dp.theorem2(sigma=40.0, n=100_000)
    assert r["applicable"] and 0 < r["eps"] < r["eps0"]
    # more outputs amplify more
    assert dp.theorem2(40.0, 1_000_000)["eps"] < r["eps"]
    # our parameters: noise far below one unit -> eps0 huge, the theorem does not apply
    small = dp.theorem2(sigma=2e-9, n=512)
    assert not small["applicable"] and "exceeds" in small["why"]
