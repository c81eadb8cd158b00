"""Handles are freed deterministically; no growth over many cycles; build behaviour."""

import gc
import os

import numpy as np
import pytest

from secinfer.crypto import he
from secinfer.native import build
from secinfer.native import lib as _native


def test_close_and_context_manager_free_handles(P, kp):
    base = _native.live_handles()
    with P.encrypt([1.0, 2.0], kp.pk) as ct:
        assert _native.live_handles() == base + 1
        pt = P.decrypt(ct, kp.sk)
    assert _native.live_handles() == base + 1
    pt.close()
    pt.close()  # idempotent
    assert _native.live_handles() == base
    with pytest.raises(he.HEClosedError):
        P.decode(pt)


def test_finaliser_frees_dropped_objects(P, kp):
    gc.collect()  # objects other tests in this worker dropped must not count against us
    base = _native.live_handles()
    for _ in range(50):
        P.encrypt([1.0], kp.pk)  # dropped at once
    gc.collect()
    assert _native.live_handles() == base


def _rss_mb() -> float:
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.slow
def test_no_memory_growth_over_10000_cycles(kp):
    P10 = he.get_params("ckks-n10-insecure")
    pair = P10.keygen()
    x = np.linspace(-1, 1, 8)
    base = _native.live_handles()

    def cycles(n):
        for _ in range(n):
            with P10.encrypt(x, pair.pk) as ct, P10.decrypt(ct, pair.sk) as pt:
                pass

    cycles(1000)  # warm up allocators
    gc.collect()
    before = _rss_mb()
    cycles(10000)
    gc.collect()
    after = _rss_mb()
    assert _native.live_handles() == base
    print(f"\n[he] RSS over 10,000 encrypt/decrypt cycles: {before:.0f} -> {after:.0f} MB")
    assert after - before < 64


def test_library_is_built_and_fresh():
    assert build.LIB_PATH.exists()
    assert not build.needs_build()
    assert "lattigo/v6.1.1" in _native.version()


def test_missing_go_gives_clear_error(monkeypatch):
    monkeypatch.setattr(build.shutil, "which", lambda name: None)
    monkeypatch.setattr(build.os, "access", lambda *a: False)
    with pytest.raises(he.HENativeBuildError, match="Go toolchain"):
        build.find_go()


def test_recovered_go_errors_do_not_crash(P, kp):
    # Invalid handles, negative sizes: typed errors from the Go layer.
    with pytest.raises(he.HEArgumentError):
        _native.call("he_decrypt", P.handle, 10**12, 10**12 + 1, _native.C.byref(_native.u64()))
    with pytest.raises(he.HEArgumentError):
        P.encode(np.ones(P.max_slots + 1))
    with pytest.raises(he.HEArgumentError):
        P.encode([np.nan])


def test_needs_build_when_library_missing_or_stale(monkeypatch, tmp_path):
    monkeypatch.setattr(build, "LIB_PATH", tmp_path / "missing.so")
    assert build.needs_build()
    old = tmp_path / "old.so"
    old.write_bytes(b"")
    os.utime(old, (1, 1))  # older than every Go source
    monkeypatch.setattr(build, "LIB_PATH", old)
    assert build.needs_build()


def test_old_build_command_is_an_alias_of_the_native_build():
    """``python -m secinfer.crypto.he.build`` (earlier releases) still builds the library."""
    from secinfer.crypto.he import build as old

    assert old.main is build.main and old.LIB_PATH == build.LIB_PATH
    assert build.GO_DIR.parent.name == "native" and (build.GO_DIR / "go.mod").exists()
