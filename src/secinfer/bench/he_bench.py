"""HE micro-benchmarks: ``secinfer.bench.he_bench.run() -> dict`` (wired into
``secinfer bench he``). Not a test: numbers depend on the machine and its load.

For each 128-bit parameter set: key generation, encrypt/decrypt, plaintext and
ciphertext multiplication, rescale, rotation (plain and hoisted, per rotation), a
784x128 plaintext-matrix times encrypted-vector product, LWE packing per coefficient,
and the sizes of ciphertexts and keys. Times are medians in milliseconds.

Cheap operations (what each timed region contains; ``res["cheap_ops"]`` says the same).
Operands are degree-1 ciphertexts and a plaintext at the top level (``res["op_level"]``,
2 for ``ckks-n13-128``), the level of LinearPlan diagonals and of crisp's weight
plaintexts at N = 2^13. Plaintexts are encoded before timing; the first product with a
plaintext (untimed warm-up) caches its Montgomery form.

* ``add``: ``ev.add(ct, ct2)`` with a freshly allocated output ciphertext.
* ``add_into``: ``ev.add(ct, ct2, out=dst)``, ``dst`` allocated once before timing.
* ``mul_plain``: ``ev.mul(ct, pt)``, freshly allocated output (same call as before the
  into-destination variants existed).
* ``mul_plain_into``: ``ev.mul_plain(ct, pt, out=dst)`` (no allocation; in place,
  ``out=ct``, costs the same).
* ``mul_plain_add``: ``ev.mul_plain_add(ct, pt, acc)``, i.e. ``acc += ct * pt``.
* ``mul_plain_fresh_pt``: ``ev.mul(ct, pt_new)`` with a plaintext encoded (untimed) just
  before, so the Montgomery conversion is inside the timed region.
None of them includes closing the result (done after the clock stops).
"""

from __future__ import annotations

import os
import platform
import time

import numpy as np

from secinfer.crypto.he.evaluator import Evaluator
from secinfer.crypto.he.linear import LinearPlan
from secinfer.crypto.he.params import SECURE_SETS, get_params

# The CKKS benchmark covers the 128-bit CKKS sets; the coefficient-domain SAFHIRE sets
# (rlwe-*) have one level and are measured by bench_pack.
CKKS_SETS = tuple(n for n in SECURE_SETS if n.startswith("ckks-"))
from secinfer.crypto.he import rlwe


def _median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
        _close(out)
    return float(np.median(times) * 1e3)


def _median_ms_setup(setup, fn, repeats: int) -> float:
    """Median of fn(setup()) with setup() outside the timed region."""
    times = []
    for _ in range(repeats):
        arg = setup()
        t0 = time.perf_counter()
        out = fn(arg)
        times.append(time.perf_counter() - t0)
        _close(out)
        _close(arg)
    return float(np.median(times) * 1e3)


def _close(obj) -> None:
    if obj is None:
        return
    if isinstance(obj, dict):
        for v in obj.values():
            _close(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _close(v)
    elif hasattr(obj, "close"):
        obj.close()


def _det_values(n: int, salt: int) -> np.ndarray:
    # Deterministic, input-independent bench data (no RNG needed).
    k = np.arange(n, dtype=np.float64)
    return np.sin(0.37 * k + salt) + 1j * np.cos(0.11 * k * (salt + 1))


def bench_set(name: str, repeats: int = 5, matvec_shape=(128, 784), pack_count: int = 256) -> dict:
    P = get_params(name)
    res: dict = {"params": name, "log_n": P.log_n, "levels": P.max_level,
                 "log_qp": P.spec.log_qp, "security_bits": P.security_bits, "ms": {}, "bytes": {}}
    ms = res["ms"]
    ms["keygen_sk_pk"] = _median_ms(P.keygen, max(2, repeats // 2))
    kp = P.keygen()
    if not P.spec.key_switching:
        return _bench_no_key_switching(P, kp, res, repeats)
    m, n = matvec_shape
    W = np.cos(np.outer(np.arange(m), np.arange(n)) * 0.01) / np.sqrt(n)
    plan = LinearPlan.dense(P, W)
    hoist = list(range(1, 9))
    t0 = time.perf_counter()
    evk = P.gen_eval_keys(kp.sk, rotations=hoist, conjugate=True, pack=True,
                          galois=plan.galois_elements())
    ms["keygen_eval_keys"] = (time.perf_counter() - t0) * 1e3
    res["n_galois_keys"] = len(evk.galois_elements)
    ev = Evaluator(P, evk)
    x = _det_values(P.max_slots, 1)
    y = _det_values(P.max_slots, 2)
    pt = P.encode(y)
    ms["encode"] = _median_ms(lambda: P.encode(x), repeats)
    ms["encrypt_pk"] = _median_ms(lambda: P.encrypt(pt, kp.pk), repeats)
    ms["encrypt_sk"] = _median_ms(lambda: P.encrypt(pt, kp.sk), repeats)
    ct = P.encrypt(x, kp.pk)
    ct2 = P.encrypt(y, kp.pk)
    ms["decrypt"] = _median_ms(lambda: P.decrypt(ct, kp.sk), repeats)
    # Cheap operations (see the module docstring for each timed region). More repeats:
    # they take well under a millisecond and the median needs samples on a busy machine.
    cheap = max(20, repeats * 20)
    res["op_level"] = ct.level
    res["cheap_ops"] = {
        "add": "ev.add(ct, ct2): fresh output", "add_into": "ev.add(ct, ct2, out=dst)",
        "mul_plain": "ev.mul(ct, pt): fresh output, pt pre-encoded",
        "mul_plain_into": "ev.mul_plain(ct, pt, out=dst): pt pre-encoded",
        "mul_plain_add": "ev.mul_plain_add(ct, pt, acc): acc += ct*pt",
        "mul_plain_fresh_pt": "ev.mul(ct, pt): fresh output, pt encoded untimed just before",
        "level": f"all operands at level {ct.level}"}
    dst = ev.mul(ct, pt)                      # warm-up: caches pt's Montgomery form
    acc = ev.mul(ct, pt)
    ms["add"] = _median_ms(lambda: ev.add(ct, ct2), cheap)
    ms["add_into"] = _median_ms(lambda: ev.add(ct, ct2, out=dst) and None, cheap)
    ms["mul_plain"] = _median_ms(lambda: ev.mul(ct, pt), cheap)
    ms["mul_plain_into"] = _median_ms(lambda: ev.mul_plain(ct, pt, out=dst) and None, cheap)
    ms["mul_plain_add"] = _median_ms(lambda: ev.mul_plain_add(ct, pt, acc) and None, cheap)
    ms["mul_plain_fresh_pt"] = _median_ms_setup(lambda: P.encode(y), lambda p: ev.mul(ct, p),
                                                max(5, repeats * 2))
    _close([dst, acc])
    ms["mul_ct_relin"] = _median_ms(lambda: ev.mul(ct, ct2), repeats)
    prod = ev.mul(ct, pt)
    ms["rescale"] = _median_ms(lambda: ev.rescale(prod), repeats)
    ms["rotate"] = _median_ms(lambda: ev.rotate(ct, 1), repeats)
    ms["rotate_hoisted_per_rotation"] = _median_ms(lambda: ev.rotate_hoisted(ct, hoist),
                                                   repeats) / len(hoist)
    ms["conjugate"] = _median_ms(lambda: ev.conjugate(ct), repeats)
    vin = plan.encrypt_input(np.real(x[:n]), kp.pk)
    ms[f"matvec_{n}x{m}"] = _median_ms(lambda: plan.apply(ev, vin), repeats)
    got = plan.decrypt_output(plan.apply(ev, vin), kp.sk)
    res["matvec_max_abs_error"] = float(np.abs(got - W @ np.real(x[:n])).max())
    res["checks"] = {"matvec_max_abs_error_below_1e-3": res["matvec_max_abs_error"] < 1e-3}
    res["matvec_diagonals"] = plan.n_diagonals
    # LWE packing at level 0 (the hybrid scheme's working level).
    scale = 2.0 ** 30
    cv = np.arange(P.n) % 200 - 100
    cct = rlwe.coeff_encrypt(P, cv, kp.pk, scale, level=0)
    lwes = rlwe.extract_lwe(P, cct, np.arange(pack_count))
    with rlwe.pack_lwe(ev, lwes) as packed:
        got = rlwe.coeff_decrypt(P, packed, kp.sk, scale)[rlwe.spread_positions(pack_count, P.n)]
    res["checks"]["lwe_pack_exact"] = bool(np.array_equal(np.round(got), cv[:pack_count]))
    ms["lwe_extract_per_coeff"] = _median_ms(
        lambda: rlwe.extract_lwe(P, cct, np.arange(pack_count)), repeats) / pack_count
    ms["lwe_pack_per_coeff"] = _median_ms(lambda: rlwe.pack_lwe(ev, lwes),
                                          max(2, repeats // 2)) / pack_count
    res["lwe_pack_count"] = pack_count
    res["bytes"] = {
        "ciphertext_fresh": len(ct.to_bytes()),
        "ciphertext_level0": len(cct.to_bytes()),
        "public_key": len(kp.pk.to_bytes()),
        "secret_key": len(kp.sk.to_bytes()),
        "eval_keys": len(evk.to_bytes()),
        "galois_key_each": len(evk.to_bytes()) // max(1, res["n_galois_keys"] + 1),
    }
    _close([ct, ct2, prod, pt, vin, cct, lwes, ev, evk])
    kp.close()
    return res


def _bench_no_key_switching(P, kp, res: dict, repeats: int) -> dict:
    """A set that refuses key-switching keys (issue 22 item 8, e.g. ckks-n13-q195-128):
    only the rows that need no key switch, each checked against the plaintext result."""
    ms = res["ms"]
    res["skipped"] = (f"relinearisation, rotations, matvec and packing: {P.name} refuses "
                      f"key-switching keys (P is {P.spec.key_switch_gap_bits} bits below a digit)")
    x = _det_values(P.max_slots, 1)
    y = _det_values(P.max_slots, 2)
    pt = P.encode(y)
    ev = Evaluator(P)
    ms["encode"] = _median_ms(lambda: P.encode(x), repeats)
    ms["encrypt_pk"] = _median_ms(lambda: P.encrypt(pt, kp.pk), repeats)
    ct = P.encrypt(x, kp.pk)
    ms["decrypt"] = _median_ms(lambda: P.decrypt(ct, kp.sk), repeats)
    cheap = max(20, repeats * 20)
    ms["add"] = _median_ms(lambda: ev.add(ct, ct), cheap)
    ev.mul(ct, pt).close()
    ms["mul_plain"] = _median_ms(lambda: ev.mul(ct, pt), cheap)
    prod = ev.mul(ct, pt)
    ms["rescale"] = _median_ms(lambda: ev.rescale(prod), repeats)
    with ev.rescale(prod) as r:
        err = float(np.abs(P.decrypt_decode(r, kp.sk) - x * y).max())
    res["checks"] = {"mul_plain_rescale_max_abs_error": err, "mul_plain_rescale_error_below_1e-4": err < 1e-4}
    res["bytes"] = {"ciphertext_fresh": len(ct.to_bytes()), "public_key": len(kp.pk.to_bytes()),
                    "secret_key": len(kp.sk.to_bytes())}
    _close([ct, prod, pt, ev])
    kp.close()
    return res


def run(sets=CKKS_SETS, repeats: int = 5) -> dict:
    """Benchmark every named 128-bit set; returns a JSON-ready dict."""
    return {
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                    "python": platform.python_version(),
                    "load_avg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None},
        "library": "lattigo v6.1.1 via secinfer.crypto.he",
        "sets": {name: bench_set(name, repeats) for name in sets},
    }


if __name__ == "__main__":  # pragma: no cover
    import json
    print(json.dumps(run(), indent=2))
