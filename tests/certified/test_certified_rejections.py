"""Rejection tests: a corrupt user (or, for release-blinding, provider) deviates from
outside the protocol code (endpoint proxies, test-side patches of its own kernel); the
honest party aborts on the named check and nobody gets an output. Each test fails when
its check alone is disabled (``pytest --disable-check NAME``)."""

import hashlib

import numpy as np
import pytest

from certified_helpers import Proxy, aborted, no_output, run_certified
from secinfer.crypto.he.params import CKKSParams
from secinfer.crypto.he.evaluator import Evaluator
from secinfer.crypto.zk import bdop, zkbpp
from secinfer.protocols.certified import protocol as P

X = np.array([0.5, 1.25, 2.0, 0.75, 3.5, 0.125, 1.0, 2.5])


def _user(**kw):
    return {"user": lambda ep: Proxy(ep, **kw)}


def _change_first_point(tag, arrays):
    if tag == "certified/signed":
        msgs = arrays[0].copy()
        msgs[1] ^= 0x01                      # low byte of the first 16-bit data point
        arrays[0] = msgs
    return arrays


@pytest.mark.covers_check("certified", "signature")
def test_data_point_changed_after_signing():
    res = run_certified(X, wrap=_user(on_recv=_change_first_point))
    assert aborted(res, "provider", "signature") and no_output(res)


@pytest.mark.covers_check("certified", "signature")
def test_snp_changed_inside_a_signed_batch():
    """Disease susceptibility signs a ciphertext's SNPs as one message: one changed SNP
    anywhere in the batch breaks its signature."""
    snps = np.array([0, 1, 2, 1, 0, 2, 2, 1, 0, 1], dtype=float)

    def change_last_snp(tag, arrays):
        if tag == "certified/signed":
            msgs = arrays[0].copy()
            msgs[snps.size - 1] ^= 0x01          # the batch's last 8-bit SNP
            arrays[0] = msgs
        return arrays

    res = run_certified(snps, "weighted-sum", {"weights": [0.1] * snps.size},
                        wrap=_user(on_recv=change_last_snp))
    assert aborted(res, "provider", "signature") and no_output(res)


@pytest.mark.covers_check("certified", "signature")
@pytest.mark.parametrize("how", ["forged", "missing"])
def test_forged_or_missing_signature(how):
    def edit(tag, arrays):
        if tag == "certified/upload":
            sigs = arrays[1].copy()
            if how == "forged":
                sigs[100] ^= 0x40
            else:
                sigs = sigs[: sigs.size - sigs.size // X.size]   # the last signature missing
            arrays[1] = sigs
        return arrays

    res = run_certified(X, wrap=_user(on_send=edit))
    assert aborted(res, "provider", "signature") and no_output(res)


@pytest.mark.covers_check("certified", "zkbpp-digest")
def test_changed_data_point_behind_the_signed_digest(monkeypatch):
    """The user hashes a changed message in the circuit but claims the signed digest."""
    originals = {}

    def on_recv(tag, arrays):
        if tag == "certified/signed":
            msg_bytes = 2 + P.NONCE_BYTES + P.UID_BYTES + P.TS_BYTES
            old = arrays[0][:msg_bytes].tobytes()
            arrays = _change_first_point(tag, arrays)
            new = arrays[0][:msg_bytes].tobytes()
            originals[hashlib.sha256(new).digest()] = hashlib.sha256(old).digest()
        return arrays

    real = P.statement

    def claiming_signed(s, cfg, pk, ct, com, key, digests):
        return real(s, cfg, pk, ct, com, key, [originals.get(d, d) for d in digests])

    monkeypatch.setattr(P, "statement", claiming_signed)
    res = run_certified(X, wrap=_user(on_recv=on_recv))
    assert aborted(res, "provider", "zkbpp-digest") and no_output(res)


@pytest.mark.covers_check("certified", "zkbpp-encryption")
def test_ciphertext_encrypting_other_data(monkeypatch):
    real = P.data_of
    monkeypatch.setattr(P, "data_of", lambda u, m: real(u, m) + 3)   # only the user calls it
    res = run_certified(X)
    assert aborted(res, "provider", "zkbpp-encryption") and no_output(res)


@pytest.mark.covers_check("certified", "noise-bound")
def test_noise_outside_the_bound(monkeypatch):
    """The user adds a large error to c0 (and to her witness and commitment) and answers
    the bound proof without rejection sampling."""
    real_enc = P.encrypt_with_randomness
    spike = 1 << 26                              # above 2 M_c: outside the accepted box whatever the mask

    def noisy(params: CKKSParams, pt, pk, seed=None, randomness=None):
        ct, rnd = real_enc(params, pt, pk, seed=seed)
        res = np.zeros((ct.level + 1, params.n), np.uint64)
        res[:, 3] = spike                        # the error polynomial spike * X^3
        with zkbpp.plaintext(params, res, ct.level, int(round(ct.log_scale))) as sp:
            ct2 = Evaluator(params).add(ct, sp)
        rnd.e0 = rnd.e0.copy()
        rnd.e0[3] += spike
        return ct2, rnd

    def cheating_bound(bp, key, com, noises, r, prg, ctx):
        s = np.vstack([r, noises]).astype(np.int64)
        y = np.stack([prg.below(2 * m + 1, bp.n) - m for m in bp.masks]).astype(np.int64)
        digest = bdop._hash(bp, ctx, key, com, bdop.apply_f(bp, key, y))
        z = y + bdop.negacyclic_small(s, bdop.challenge_poly(bp, digest))
        return digest + z.astype("<i4").tobytes()

    monkeypatch.setattr(P, "encrypt_with_randomness", noisy)
    monkeypatch.setattr(P.bdop, "prove_bound", cheating_bound)
    res = run_certified(X)
    assert aborted(res, "provider", "noise-bound") and no_output(res)


@pytest.mark.covers_check("certified", "zkbpp-view")
def test_one_view_of_one_repetition_tampered():
    def edit(tag, arrays):
        if tag == "certified/upload":
            proof = arrays[4].copy()
            proof[6 + 4 + 32 + 9 * 32 + 2 * 16 + 40] ^= 0x04   # repetition 0, after the seeds
            arrays[4] = proof
        return arrays

    res = run_certified(X, wrap=_user(on_send=edit))
    assert aborted(res, "provider", "zkbpp-view") and no_output(res)


@pytest.mark.covers_check("certified", "zkbpp-challenge")
def test_mispredicted_challenge(monkeypatch):
    """The user proves before the provider's nonce arrives, with a guessed context."""
    real = zkbpp.prove
    monkeypatch.setattr(P.zkbpp, "prove", lambda cfg, st, w, seed, ctx: real(
        cfg, st, w, seed, b"\x00" * 16 + ctx[16:]))
    res = run_certified(X)
    assert aborted(res, "provider", "zkbpp-challenge") and no_output(res)


@pytest.mark.covers_check("certified", "zkbpp-challenge")
def test_reused_challenge_from_another_session():
    recorded = {}

    def record(tag, arrays):
        if tag in ("certified/keys", "certified/upload"):
            recorded[tag] = [a.copy() for a in arrays]
        return arrays

    first = run_certified(X, wrap=_user(on_send=record), session_id=b"\x01" * 16)
    assert not isinstance(first["provider"], BaseException)

    def replay(tag, arrays):
        return [a.copy() for a in recorded[tag]] if tag in recorded else arrays

    res = run_certified(X, wrap=_user(on_send=replay), session_id=b"\x02" * 16)
    assert aborted(res, "provider", "zkbpp-challenge") and no_output(res)


@pytest.mark.covers_check("certified", "release-decryption")
@pytest.mark.parametrize("usecase", ["sum", "weighted-sum"])
def test_wrong_decrypted_result_at_release(monkeypatch, usecase):
    """The user reports psi's decryption + 5 data units (sum: the constant coefficient of
    the Z_q release; weighted sum: the slots)."""
    calls = []
    if usecase == "sum":
        real = P.constant_coeff

        def lying(params, ct, sk):
            calls.append(1)
            out = real(params, ct, sk)
            return (out + 5 * 2 ** 15) % int(params.q[0]) if len(calls) == 1 else out

        monkeypatch.setattr(P, "constant_coeff", lying)
        opts = None
    else:
        real = CKKSParams.decrypt_decode

        def lying(self, ct, sk):
            out = real(self, ct, sk)
            calls.append(1)
            return out + 5.0 if len(calls) == 1 else out     # the user's m, not m_B

        monkeypatch.setattr(CKKSParams, "decrypt_decode", lying)
        opts = {"weights": list(np.linspace(0.1, 0.8, X.size))}
    res = run_certified(X, usecase, opts)
    assert aborted(res, "provider", "release-decryption") and no_output(res)


@pytest.mark.covers_check("certified", "release-blinding")
def test_provider_asks_to_decrypt_the_raw_upload():
    """A curious provider sends the user's own ciphertext instead of B(psi(ct))."""
    seen = {}

    def on_recv(tag, arrays):
        if tag == "certified/upload":
            seen["ct"] = arrays[2].copy()
        return arrays

    def on_send(tag, arrays):
        if tag == "certified/release":
            arrays[0] = seen["ct"]
        return arrays

    res = run_certified(X, wrap={"provider": lambda ep: Proxy(ep, on_send=on_send, on_recv=on_recv)})
    assert aborted(res, "user", "release-blinding") and no_output(res)


@pytest.mark.covers_check("certified", "public-key")
def test_public_key_with_a_planted_offset():
    """The user sends pk0 + 2^30 X^5: no short (s, e) opens it for the provider's a (a key
    with a planted offset would shift what her ciphertexts decrypt to); her proof, made for
    her real key, fails."""
    def edit(tag, arrays):
        if tag == "certified/keys":
            pk0 = arrays[0].copy()
            pk0[:, 5] = (pk0[:, 5] + np.uint64(1 << 30)) % np.array([np.uint64(q) for q in _primes()])
            arrays[0] = pk0
        return arrays

    res = run_certified(X, wrap=_user(on_send=edit))
    assert aborted(res, "provider", "public-key") and no_output(res)


def _primes():
    from secinfer.crypto.he.params import get_params
    from secinfer.protocols.certified import usecases

    return get_params(usecases.get("sum").test_params).q
