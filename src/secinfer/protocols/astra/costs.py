"""Declared costs of the ASTRA kernels (payload bits summed over all senders, rounds).

"elements" are ring elements of l bits; hashes (SHA-256, 256 bits) are listed separately:
they are amortised to a constant number per session [ASTRA 4.2] and do not grow with the
number of gates. Tests in tests/astra compare these with the metered traffic.
"""

from __future__ import annotations

from secinfer.crypto.gc.circuit import msb_sub3_circuit, msb_sub_circuit

KAPPA = 128


def mul_cost(n: int, security: str, l: int = 64, bucket: int = 2, opened: int = 0) -> dict:
    """n independent multiplication gates [ASTRA Thm. 4.2, Thm. 4.4]."""
    if security == "semi-honest":
        return {"offline_bits": n * l, "online_bits": 2 * n * l, "online_rounds": 1}
    per_gate = 9 * bucket + 3                      # 21 for B = 2  [ASTRA Thm. 4.4]
    return {"offline_bits": (per_gate * n + 9 * opened) * l, "online_bits": 4 * n * l,
            "online_rounds": 2}


def matmul_cost(b: int, k: int, n: int, security: str, l: int = 64, bucket: int = 2,
                opened: int = 0, receiver_checked: bool = False) -> dict:
    """U = X (b x k) @ W (k x n): Pi_dp^s [ASTRA Fig. 11] / Pi_dp^m [ASTRA Lemma 5.1] per output.

    ``receiver_checked`` (``AstraEngine.matmul_offline(check_at=...)``, W's masked value
    known offline): m*_w moves to the offline phase and the mul-mz hashes travel with the
    output to its receiver, so the kernel itself needs one online round."""
    if security == "semi-honest":
        return {"offline_bits": b * n * l, "online_bits": 2 * b * n * l, "online_rounds": 1}
    prods = b * k * n
    offline = ((9 * bucket + 3) * prods + 9 * opened) * l
    if receiver_checked:
        return {"offline_bits": offline + k * n * l, "online_bits": (2 * b * n + b * k) * l, "online_rounds": 1}
    return {"offline_bits": offline,
            # 2 per output (m_u exchange) + m*_x, m*_w once per wire: 2d + 2 for b = n = 1
            "online_bits": (2 * b * n + b * k + k * n) * l, "online_rounds": 2}


def bitext_cost(n: int, security: str, l: int = 64) -> dict:
    """Pi_BitExt on n values [ASTRA Lemma 5.2]; wire sizes are whole bytes (1 bit -> 8)."""
    if security == "semi-honest":
        ands = msb_sub_circuit(l).and_count
        return {"online_bits": n * (l * KAPPA + 8), "online_rounds": 2, "and_gates": ands,
                "offline_gc_bits": n * ands * 2 * KAPPA}
    ands = msb_sub3_circuit(l).and_count
    return {"online_bits": n * (l * KAPPA + 8), "online_hash_bits": 256, "online_rounds": 2,
            "and_gates": ands, "offline_gc_bits": n * ands * 2 * KAPPA}
