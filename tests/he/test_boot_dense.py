"""The dense-secret bootstrappable sets (ckks-boot-n16-dense-128 and its small test twin):
the 128-bit claim of the extended chain checked against the bound and the docs table, the
refusals (insecure set, an extension past the bound, sparse slots), bootstrapping with the
DFT matrices encoded on demand against the resident ones, and the Go memory knob."""

import re
from pathlib import Path

import numpy as np
import pytest

from secinfer.crypto import he
from secinfer.crypto.he import bootstrap as hb
from secinfer.crypto.he.errors import HEArgumentError
from secinfer.crypto.he.params import HE_STANDARD_128_EXT, PARAMETER_SETS, CKKSParams, ParamSpec
from secinfer.errors import InsecureParametersError

SECURE = "ckks-boot-n16-dense-128"
SMALL = "ckks-boot-n12-dense-insecure"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "he.md"


def test_n16_dense_extension_fits_the_128_bit_bound_without_keys():
    P = he.get_params(SECURE, allow_insecure=False)
    assert P.security_bits == 128 and P.spec.secret_h == 0 and P.spec.bootstrappable
    pl = hb.plan(P)
    assert pl["log_n"] == 16 and pl["log_slots"] == 15
    assert pl["secret"] == "dense ternary"
    # the extension as docs/he.md states it: 24 Q primes, 8 P primes, dnum 3, 1684 <= 1747
    assert (pl["q_count"], pl["p_count"], pl["dnum"]) == (24, 8, 3)
    assert pl["log_qp"] == 1684 <= HE_STANDARD_128_EXT[16]
    assert pl["security_bits"] == 128
    # the memory lever: 5.0 GB of bootstrapping keys (Lattigo's default literal: 8.8 GB)
    assert pl["galois_key_bytes"] == 2 * 3 * (24 + 8) * 2**16 * 8
    assert 4.5e9 < pl["key_bytes_estimate"] < 5.5e9
    assert pl["output_level"] == 8


def test_docs_table_matches_the_new_sets():
    text = DOCS.read_text()
    for name in (SECURE, SMALL):
        spec = PARAMETER_SETS[name]
        row = next(line for line in text.splitlines() if line.startswith(f"| `{name}` |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert int(cells[1]) == spec.log_n
        assert int(cells[4]) == spec.log_qp
        assert cells[3] == f"{spec.log_p[0]}×{len(spec.log_p)}"
        assert cells[6].startswith("128") == (not spec.insecure)
    row = next(line for line in text.splitlines() if line.startswith(f"| `{SECURE}` |"))
    pl = hb.plan(he.get_params(SECURE))
    assert re.search(rf"log2\(QP\) = {pl['log_qp']} ≤ {HE_STANDARD_128_EXT[16]}", row)


def test_insecure_twin_is_refused_where_insecure_sets_are():
    with pytest.raises(InsecureParametersError):
        he.get_params(SMALL, allow_insecure=False)


def test_extension_past_the_bound_is_refused_before_any_key():
    # the same residual set with twelve P primes in the extension (dnum 2): log2 QP = 1928
    spec = ParamSpec("ckks-boot-n16-wide-test-128", 16, (55,) + (40,) * 8, (42,) * 9, 40,
                     boot_log_p=(61,) * 12)
    P = CKKSParams(spec)
    pl = hb.plan(P)
    assert pl["log_qp"] > HE_STANDARD_128_EXT[16] and pl["security_bits"] == 0
    with P.keygen() as kp:
        with pytest.raises(InsecureParametersError, match="1747"):
            hb.Bootstrapper(P, kp.sk)


def test_sparse_slots_are_refused():
    P = he.get_params(SMALL)
    with P.keygen() as kp:
        with pytest.raises(HEArgumentError, match="full ciphertexts"):
            hb.Bootstrapper(P, kp.sk, log_slots=P.log_max_slots - 1)


@pytest.mark.slow
@pytest.mark.parametrize("on_demand", [True, False])
def test_dense_bootstrap_with_and_without_resident_dft_matrices(on_demand):
    P = he.get_params(SMALL)
    x = np.random.default_rng(8).uniform(-1, 1, P.max_slots)
    with P.keygen() as kp, hb.Bootstrapper(P, kp.sk, dft_on_demand=on_demand) as bt:
        assert bt.dft_on_demand is on_demand and bt.output_level == 6
        for _ in range(2):          # the on-demand matrices are made again for each bootstrap
            with P.encrypt(x, kp.pk, log_slots=P.log_max_slots, level=0) as ct, bt.bootstrap(ct) as f:
                assert f.level == bt.output_level
                got = P.decrypt_decode(f, kp.sk).real
            assert np.abs(got - x).max() < 1e-5
        assert (bt.dft_encode_s > 0) is on_demand


def test_go_memory_limit_round_trip():
    first = hb.go_memory(6_000_000_000, -1)
    try:
        again = hb.go_memory(-1, -1)
        assert again["previous_limit"] == 6_000_000_000
        assert again["heap_live_bytes"] > 0 and again["go_sys_bytes"] >= again["heap_live_bytes"]
    finally:
        hb.go_memory(first["previous_limit"] if first["previous_limit"] > 0 else (1 << 63) - 1, -1)


def test_whole_network_run_is_chosen_only_when_its_memory_fits(monkeypatch):
    from secinfer.bench import ckks_baseline as cb

    est = cb.network_memory_estimate()
    # bootstrapping keys (from the plan) + one DFT matrix + 48 rotation keys + 64 diagonals + 1 GB
    assert est["boot_key_bytes"] == est["plan"]["key_bytes_estimate"]
    assert est["rotation_key_bytes"] == 2 * 1 * 18 * 2**16 * 8        # one digit: 9 Q + 9 P limbs
    assert est["total_bytes"] < cb.MAX_RUN_RSS
    monkeypatch.setattr(cb, "_mem_available_bytes", lambda: 4_000_000_000)
    fit = cb.whole_network_fits()
    assert not fit["fits"] and "available 4.0 GB" in fit["why"]
    monkeypatch.setattr(cb, "_mem_available_bytes", lambda: 20_000_000_000)
    assert cb.whole_network_fits()["fits"]
