"""Cost model of the two LTEE kinds [STAMP 3.3, 5.1, 5.4] and declared protocol costs.

No LTEE exists on these machines (the device is an emulation, a Python process), so its
time cannot be measured; it is *modelled* from what the emulation really does:

* bus time = bytes that really crossed the host<->device pipe / bus bandwidth, plus a
  per-transaction latency;
* compute time = primitive operations the device really executed (it counts them,
  kernel by kernel, ``kernels.OpCount``) x cycles per operation / clock;
* PRF time = AES bytes the device really generated / AES-engine throughput.

How the cycle costs are chosen (and why they are honest): the paper measured its
LTEE-chip on an Arduino Due (Cortex-M3, 84 MHz) and reports two anchors [STAMP 4.5]: "1
million 32-bit multiplications take less than a second" (<= 84 cycles each, loop and
memory included) and "double-precision exponentiation takes over a minute" per million
(>= 5040 cycles each, soft-float). We charge 12 cycles per 32-bit integer element
operation (load, ALU op, store, loop overhead on a Cortex-M3 with wait-state flash),
84 cycles per soft-float multiply/add/divide (the paper's upper anchor for one
multiplication, a conservative figure for soft-float) and 5040 cycles per
exponential/square root (its lower anchor). These are stated constants, not
measurements of this machine; ``emulation_busy_s`` (the Python process's own time) is
reported next to them and never used as device time. The LTEE-SoC is the same core
at 1 GHz [STAMP 5.1] behind a 16 GB/s on-chip network; the AES engine is 14 GB/s [STAMP 5.1, 11].

Declared costs (``declared``) are this implementation's exact traffic per protocol,
used by the tests against the metered bytes and rounds, next to the paper's Table 7.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

CYCLES_INT = 12
CYCLES_FLOAT = 84
CYCLES_EXP = 5040
AES_ENGINE_BPS = 14e9


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    bus_bytes_per_s: float
    clock_hz: float
    transaction_s: float   # fixed cost per bus transaction (command decode, DMA set-up)
    description: str

    def bus_seconds(self, nbytes: int, transactions: int = 0) -> float:
        return nbytes / self.bus_bytes_per_s + transactions * self.transaction_s

    def compute_seconds(self, int_ops: int, float_ops: int, exp_ops: int, aes_bytes: int) -> float:
        cycles = CYCLES_INT * int_ops + CYCLES_FLOAT * float_ops + CYCLES_EXP * exp_ops
        return cycles / self.clock_hz + aes_bytes / AES_ENGINE_BPS


LTEE_CHIP = DeviceProfile("ltee-chip", 15e6, 84e6, 20e-6,
                          "discrete TPM-like chip: Cortex-M3 at 84 MHz, LPC bus 15 MB/s [STAMP 5.1]")
LTEE_SOC = DeviceProfile("ltee-soc", 16e9, 1e9, 1e-6,
                         "SoC security subsystem: Cortex-M3 at 1 GHz, 128-bit on-chip network 16 GB/s [STAMP 5.1]")
PROFILES = {p.name: p for p in (LTEE_CHIP, LTEE_SOC)}


def device_seconds(profile: DeviceProfile, bus_bytes: int, transactions: int, ops: dict) -> dict:
    """Modelled LTEE time for one party: bus and compute (they do not overlap)."""
    bus = profile.bus_seconds(bus_bytes, transactions)
    comp = profile.compute_seconds(ops.get("int_ops", 0), ops.get("float_ops", 0), ops.get("exp_ops", 0),
                                   ops.get("aes_bytes", 0))
    return {"bus_s": bus, "compute_s": comp, "total_s": bus + comp}


# ---- declared inter-party costs of this implementation (bytes of payload, 4-byte ring) ------
def declared(kind: str, n: int, security: str, n_out: int | None = None, elem: int = 4) -> dict:
    """Inter-party payload bytes (all parties together) and rounds of one device protocol
    on n input elements (data and parameters, summed over the jobs of the batch split) and
    n_out output elements. Ring elements travel as 4-byte words (``Engine.wire``), the
    paper's count; the exp path's mantissa is 8 bytes and its exponent 4.

    rss (ReLU, MaxPool, BatchNorm, LayerNorm [STAMP Protocol 4]):
      semi-honest: step 2 n + step 5 n_out elements; malicious: step 2 twice 2n, step 5 2 n_out
      (the real component and its padded copy, or, when the result feeds products only,
      A_t + rho and rho: the same count, and the next product opens no rho).
    3of3 (MatMul + truncation + non-linearity [STAMP Protocol 5], semi-honest): 2n + n_out.
    exp (softmax [STAMP Protocol 6]): mantissa and exponent words instead of one element in step 2.
    """
    n_out = n if n_out is None else n_out
    mal = security == "malicious"
    if kind == "rss":
        b = (4 * n + 2 * n_out) if mal else (n + n_out)
    elif kind == "3of3":
        if mal:
            raise ValueError("the 3-out-of-3 path is semi-honest only")
        b = 2 * n + n_out
    elif kind == "exp":
        b = (8 * n + 2 * n_out) if mal else (2 * n + n_out)
    else:
        raise ValueError(kind)
    return {"bytes": b * elem, "rounds": 2}


def declared_verified_product(n_x: int, n_out: int, rho_open: bool = True, elem: int = 4) -> dict:
    """Malicious product, before its device step (``StampBackend._verified``), all parties:
    the reshare of the 3-out-of-3 product (each party its component to the previous one,
    3 n_out elements) and, in the same round, the opening of rho = x - a (3 n_x elements and
    three 32-byte hashes) unless an earlier product of the same x, the masked input, or the
    LTEEs of the device step that made x (``StampBackend._act_setup``: its step 5 carries
    rho, at the cost of the step-5 copies it replaces) already gave it. sigma = W - b is
    not here: it is opened once per weight in the offline phase (``declared_sigma_offline``).
    The delta check of all pending products costs 3 x 32 bytes per check
    (``DELTA_CHECK_BYTES``), before each reveal."""
    b = 3 * n_out * elem + ((3 * n_x * elem + 3 * 32) if rho_open else 0)
    return {"bytes": b, "rounds": 1}


def declared_sigma_offline(weight_sizes: list[int], elem: int = 4) -> int:
    """Offline, malicious: sigma = W - b of every weight that is a product's second operand,
    opened together (3 elements per weight element and three 32-byte hashes)."""
    return 3 * sum(weight_sizes) * elem + 3 * 32 if weight_sizes else 0


def declared_premultiplied(n_out: int, elem: int = 4) -> dict:
    """Malicious product whose first operand x is shared as A + rho (the masked input, or
    a device step's result with rho from the LTEEs) and whose second is a weight
    (``StampBackend._premultiply``), all parties: the re-share of f(A, W), 3 n_out elements,
    sent as soon as A is known -- with the input's rho, or with step 2 of the device step
    that makes x -- so **no round of its own**; z = z_AW + f(rho, W) is then local. Its
    delta is checked by hash with the next device step's step-5 messages
    (``DELTA_CHECK_BYTES`` per device step that has deltas pending, no round)."""
    return {"bytes": 3 * n_out * elem, "rounds": 0}


DELTA_CHECK_BYTES = 3 * 32


def declared_input(n: int, security: str, masked: bool = False, elem: int = 4) -> int:
    """Input sharing of n elements by its owner: semi-honest one message of n elements
    (``Engine.input``); malicious with ``masked`` (the input feeds products only,
    ``StampBackend.masked_input``): rho = X - A to both others, 2n, and one 32-byte hash,
    which also replaces the first product's rho opening."""
    if security == "malicious" and masked:
        return 2 * n * elem + 32
    return n * elem


def declared_bus(kind: str, n: int, security: str, n_out: int | None = None, elem: int = 4) -> int:
    """LTEE bus data bytes (all parties) of one device protocol, excluding the fixed
    per-request overhead (request header, 16-byte stream seeds): the evaluator passes its
    masked sum in and gets the real output component back; the other hosts receive
    only stream seeds. Malicious: two evaluators. Softmax passes exponent, mantissa and
    the host's own mantissa (4 + 8 + 8 bytes per element)."""
    n_out = n if n_out is None else n_out
    per_eval = (20 * n if kind == "exp" else elem * n) + elem * n_out
    return per_eval * (2 if security == "malicious" else 1)


def declared_output(n: int, security: str, elem: int = 4) -> dict:
    """The fused output step (``StampOps.output``): the graph's last product opened to the
    output party r through its LTEE's exact truncation; n = product elements plus bias
    elements, all parties. One job, not split across the batch [STAMP 4.2].

    semi-honest: the two non-receivers' masked 3-out-of-3 components, 2n elements, 1 round
      (the whole last layer: from the local product to the output at r).
    malicious: c = z_{r-1} + m + z_r from party r-1 (n elements and its LTEE's 16-byte MAC),
      the hash of z_{r-1} + m from party r+1 (32 bytes and a 16-byte MAC): n elements + 64
      bytes, 1 round; it follows the verified product (``declared_verified_product``, 1
      round) and the delta check of all pending products (``DELTA_CHECK_BYTES``, 1 round):
      3 rounds for the last layer, against 5 unfused (re-share, device path 2, check, opening)."""
    if security == "malicious":
        return {"bytes": n * elem + 32 + 2 * 16, "rounds": 1}
    return {"bytes": 2 * n * elem, "rounds": 1}


def declared_output_bus(n: int, n_out: int, security: str, receiver: int = 1, elem: int = 4) -> list[int]:
    """LTEE bus data bytes *per party* of the fused output step (excluding request headers
    and 16-byte seeds). Not split [STAMP 4.2]: the receiver's LTEE unmasks and truncates the
    whole batch, so its party carries all of it (the cost model charges per party, the
    latency takes the slowest). semi-honest: the receiver passes the masked sum in (n) and
    gets the output back (n_out). malicious: the receiver passes c and its component
    z_{r+1} (2n) and the two MACs (32 bytes) and gets n_out back; each non-receiver passes
    the vector its LTEE MACs (n) and gets the 16-byte MAC."""
    mal = security == "malicious"
    out = [(elem * n + 16) if mal else 0 for _ in range(3)]
    out[receiver] = elem * ((2 * n if mal else n) + n_out) + (32 if mal else 0)
    return out


# The paper's analytical figures [STAMP Table 7], semi-honest, 4-byte elements, per
# input element n (per party, the batch split over three parties).
TABLE7_STAMP = {"ReLU": {"rounds": 2, "bytes_per_n": 5.0, "ltee_bytes_per_n": 25 / 3},
                "BatchNorm": {"rounds": 2, "bytes_per_n": 4.0, "ltee_bytes_per_n": 16 / 3},
                "Softmax": {"rounds": 2, "bytes_per_n": 20 / 3, "ltee_bytes_per_n": 44 / 3}}
TABLE7_FALCON = {"ReLU": {"rounds": 10, "bytes_per_n": 16.0}, "BatchNorm": {"rounds": 335, "bytes_per_n": 224.0},
                 "MaxPool_per_comparison": {"rounds": 12}}


def _pc_depth(ring_bits: int) -> int:
    """Rounds of Falcon's DReLU here (``falcon/compare.py``): open c = x + r, the product
    tree over the l terms of the private compare in Z_p (ceil(log2 l) rounds), open d."""
    return 2 + math.ceil(math.log2(ring_bits))


def falcon_declared_rounds(kind: str, k: int = 1, drelu: str = "falcon", ring_bits: int = 32,
                           index: bool = True) -> int:
    """Rounds (dependency depth, semi-honest) of this implementation's Falcon+ protocols
    (``protocols/falcon``), checked by ``tests/stamp/test_falcon_costs.py``; next to the
    paper's [STAMP Table 7] in ``TABLE7_FALCON``. k = window / row length; ``index``: the
    running maximum keeps the argmax (the default, as Falcon's funcMaxpool).

    ``drelu="falcon"`` (default; Falcon's wrap and private compare with Falcon's round
    structure), in Z_2^32: DReLU 8 = open c + the beta products 1 + 5 Z_p product rounds +
    open d; ReLU 10 (+ Falcon's select: open b xor c, the product; Table 7: 10). MaxPool
    12 per comparison (the argmax's select after the ReLU's; Table 7: 12; 10 without the
    argmax). Pow 45 (5 x (DReLU 8 + the bit's opening 1)); reciprocal 52; BatchNorm 268
    and LayerNorm 270 (Table 7: 335); softmax 12 (k - 1) + 70. In Z_2^64 the DReLU is 9.

    ``drelu="pc"`` (Falcon's wrap and private compare over Z_p, ``compare.py``), in
    Z_2^32: ReLU 7 = open c + 5 Z_p product rounds + open d (the product x g rides in the
    first round, the bit is applied locally; Table 7: 10). MaxPool 7 per comparison (Table
    7: 12). Pow 35 (5 comparisons whose bit is opened with d); reciprocal 42 (Pow + 7);
    BatchNorm 218 and LayerNorm 220 (5 reciprocals + 8 / + 10; Table 7: 335); softmax
    7 (k - 1) + 60 (running max, then CrypTen exp 17 and the division). In Z_2^64 the
    comparison is 8 rounds (6 Z_p levels).

    ``drelu="carry"`` (the bit-sliced carry chain, Z_2^32 only): ReLU 10 (7 AND rounds,
    bit injection 2, the product 1), MaxPool 10 per comparison, Pow 40 (5 x (7 + 1)),
    reciprocal 47, BatchNorm 243, LayerNorm 245, softmax 10 (k - 1) + 65.
    Depth of the deepest party (the one-way truncation messages make the three parties'
    depths differ by up to 2)."""
    steps = math.ceil(math.log2(ring_bits))
    if drelu == "falcon":
        d = _pc_depth(ring_bits) + 1
        relu, step = d + 2, d + 1
        cmp = relu + (2 if index else 0)
    elif drelu == "pc":
        d = _pc_depth(ring_bits)
        relu, step = d, d
        cmp = relu
    elif drelu == "carry":
        if ring_bits != 32:
            raise ValueError("the carry chain's declared rounds are for Z_2^32")
        relu, step, steps = 10, 8, 5
        cmp = relu
    else:
        raise ValueError(drelu)
    recip = steps * step + 7
    fixed = {"ReLU": relu, "Pow": steps * step, "Reciprocal": recip, "BatchNorm": 5 * recip + 8,
             "LayerNorm": 5 * recip + 10}
    if kind in fixed:
        return fixed[kind]
    if kind == "MaxPool":
        return cmp * (k - 1)
    if kind == "Softmax":
        return cmp * (k - 1) + recip + 18
    raise ValueError(kind)


def falcon_declared_relu_bytes(n: int, security: str = "semi-honest", drelu: str = "falcon", ring_bits: int = 32,
                               relu: bool = True) -> int:
    """Payload bytes one party sends for a ReLU (``relu``) or a DReLU on n elements (every
    party sends the same), checked by ``tests/stamp/test_falcon_costs.py``. Ring elements
    travel in w = l/8 bytes, Z_p elements in one byte.

    "falcon", semi-honest: open c (w), the l - 1 beta products and the l - 1 products of the
    Z_p tree (one byte each), open d (1); ReLU: Falcon's select, the opened bit (1) and the
    product (w): 2w + 2l bytes per element (72 in Z_2^32; Table 7: 16). Malicious: 3 elements
    per product, a hash per opening and per product round's rho and sigma, the check before
    d and, ReLU, the check of the select's product.
    "pc", semi-honest: open c (w), the l - 1 products of the Z_p tree (one byte each), open
    d (1), ReLU: the product x g (w): 2w + l bytes per element (40 in Z_2^32; Table 7: 16).
    Malicious: each product also opens rho and sigma (3 elements per product), every opening
    and product round adds a 32-byte hash, and one 32-byte hash checks the deltas before d.
    "carry": 11 AND words, 2 ring products of the bit injection, the product: 14 words (56
    bytes in Z_2^32); malicious 3 per product."""
    w = ring_bits // 8
    mal = security == "malicious"
    per = 3 if mal else 1
    if drelu == "falcon":
        tree_rounds = math.ceil(math.log2(ring_bits))
        b = w + 2 * per * (ring_bits - 1) + 1 + (1 + per * w if relu else 0)
        hashes = (1 + 2 + 2 * tree_rounds + 1 + 1 + (1 + 2 + 1 if relu else 0)) if mal else 0
    elif drelu == "pc":
        tree_rounds = math.ceil(math.log2(ring_bits))
        b = w + per * (ring_bits - 1) + 1 + (per * w if relu else 0)
        hashes = (1 + 2 * tree_rounds + (2 if relu else 0) + 1 + 1) if mal else 0
    elif drelu == "carry":
        if ring_bits != 32:
            raise ValueError("the carry chain's declared bytes are for Z_2^32")
        products = 11 + (3 if relu else 0)
        b = per * w * products
        hashes = (2 * products + 1) if mal else 0
    else:
        raise ValueError(drelu)
    return b * n + 32 * hashes
