"""The per-layer budget of the HE linear layer: plaintext modulus t, flooding, level and
answer drop (``Budget``; row layout: ``LayerBudget``). The argument is in
docs/protocols/crisp.md ("What the engine does", "Plaintext modulus t")."""

from __future__ import annotations

import math
from fractions import Fraction

from secinfer.errors import ConfigError

GAUSS_BOUND = 19.2          # Lattigo samples the error Gaussian (sigma 3.2) within 6 sigma


def _bits(x: float) -> int:
    return max(1, math.ceil(math.log2(max(x, 1.0))))


META_LOG_SCALE = 0   # Lattigo's scale field: bookkeeping only here (the encoding is below)
# Flooding is 2^-sigma close per read coefficient times 2^-FLOOD_UNION_BITS, so the client's
# whole view of one inference (at most 2^FLOOD_UNION_BITS read coefficients, checked by
# ``prepare_server``) is within 2^-sigma of a function of its own outputs (union bound).
FLOOD_UNION_BITS = 24


class Budget:
    """Plaintext modulus t, flooding phi, level and answer drop of one layer, from the
    number of product terms per coefficient (``terms``), the weight polynomial's nonzeros
    (``nnz``) and the number of products accumulated per answer (``n_acc``).

    Encoding (BGV-style, in the coefficient domain): a ciphertext at modulus Q holds U in
    Z_t (t = factor 2^k) when its phase is c0 + c1 s = Delta U + e (mod Q) with
    Delta = t^-1 mod Q, i.e. t (c0 + c1 s) = U + t e (mod Q): decryption reads U as
    [t (c0 + c1 s)]_Q mod t while |U + t e| < Q / 2. The server's product has the phase
    Delta V + E_w with V = sum w m over the integers; adding a fresh encryption of
    -Delta R + F (R uniform in Z_t, F flooding) gives Delta U + (K + E_w + F + e_mask) with
    U = (V - R) mod t uniform and K = (V - R - U) / t, because Delta t = 1 (mod Q): the
    value is reduced mod t *inside* the ciphertext, so no statistical mask 40 bits wider
    than V is needed, and K, the only trace of V's high part, is noise that F floods.
    Rescaling by a prime q (Lattigo's exact rounding division) keeps the form, with
    U -> U q^-1 mod t and |Y| -> |Y| / q + t (1 + ||s||_1) / 2 for Y = U + t e.
    The argument in full is in docs/protocols/crisp.md ("Plaintext modulus t")."""

    def __init__(self, params, k: int, terms: int, nnz: int, n_acc: int, wbits: int, sigma: int,
                 proven=None) -> None:
        self._args = (params, k, terms, nnz, n_acc, wbits, sigma)
        self.half = params.n // 2
        # honest client: fresh-encryption noise, digits < 2^D; malicious client: what its
        # proof of plaintext knowledge guarantees (``proven``, crypto.zk.keyproof.ProvenBounds)
        fresh = (2 * params.n + 1) * GAUSS_BOUND if proven is None else proven.noise_bound()
        extra = 0 if proven is None else proven.m_extra_bits
        self.factor = 1 if proven is None else proven.factor
        self.t_bits = k + (self.factor.bit_length() - 1)
        self.t = 1 << self.t_bits
        self.T, self.D = 1, k             # one digit: t does not depend on the digit size
        self.B = _bits(terms) + self.D + extra + wbits + 1          # |V| < 2^B
        self.noise_bits = _bits(fresh) + _bits(nnz) + wbits + _bits(n_acc)   # |E_w| < 2^noise_bits
        # |K| <= 2^(B - t_bits) + 2; the mask ciphertext's own noise <= fresh
        self.pre = (1 << max(self.B - self.t_bits, 0)) + 2 + (1 << self.noise_bits) + math.ceil(fresh)
        self.sigma = sigma
        self.phi = _bits(self.pre) + sigma + FLOOD_UNION_BITS      # F uniform in [-2^phi, 2^phi]
        self.nu0 = nu0 = 1 + (1 << self.phi) + self.pre            # |U + t e| < t nu0
        lv = next((lv for lv in range(params.max_level + 1) if 2 * self.t * nu0 < params.q_level(lv)), None)
        if lv is None:
            raise ConfigError(f"crisp/ckks: parameter set {params.name} too small for this layer "
                              f"(log Q = {params.q_level(params.max_level).bit_length() - 1}, needs > "
                              f"{(2 * self.t * nu0).bit_length()}"
                              f"{', with the proof slack' if proven else ''})")
        self.level = lv
        # Answers are rescaled by their top `drop` primes before they are sent: the largest
        # drop after which |Y| < Q' / 2 still holds (``answer_bound``). Post-processing of
        # the masked answer: it reveals nothing more, it only makes the answer smaller.
        self.drop = 0
        while self.drop < lv and self.decodable(self.drop + 1):
            self.drop += 1
        self.delta = pow(self.t, -1, params.q_level(lv))

    def answer_bound(self, drop: int, nu0: int | None = None) -> Fraction:
        """Bound on |Y| / t after rescaling by the top ``drop`` primes of the layer's level:
        nu_(i+1) = nu_i / q + (1 + N) / 2 (ternary s: ||s||_1 <= N, the honest client's
        key -- a dishonest key only spoils its own decryption)."""
        prm = self._args[0]
        nu = Fraction(self.nu0 if nu0 is None else nu0)
        for lv in range(self.level, self.level - drop, -1):
            nu = nu / prm.q[lv] + Fraction(1 + prm.n, 2)
        return nu

    def decodable(self, drop: int, nu0: int | None = None) -> bool:
        """2 t nu_drop < Q' (= the modulus after the drop): decryption is exact."""
        prm = self._args[0]
        return 2 * self.t * self.answer_bound(drop, nu0) < prm.q_level(self.level - drop)

    def rebudget(self, proven) -> None:
        """Recompute for a malicious client's proven bounds (the layout fields stay)."""
        Budget.__init__(self, *self._args, proven=proven)


class LayerBudget(Budget):
    """Row layout of a matrix product (chunks of c inputs, blocks of n_o outputs, rows at
    stride S = c (n_o + 1), rows_per rows per polynomial). With one row (or as many as the
    single-sample layout already holds in one polynomial) it is the single-sample layout
    (the widest chunk, then as many outputs as fit); with more rows (a batch, or the rows
    of an im2col convolution) the layout is chosen by ``choose_rows_layout``. Every bound
    below is computed from the chosen (c, n_o, n_chunks), so the budget argument holds for
    any layout (docs/protocols/crisp.md, "Batched row layout")."""

    def __init__(self, params, k: int, k_in: int, n_out: int, wbits: int, sigma: int,
                 n_rows: int = 1, span: int | None = None) -> None:
        # span: the coefficients the rows may occupy -- N/2 with the MAC half at N/2, the
        # whole ring N without MACs (semi-honest): the last row's product ends below
        # rows_per S <= span, so no product wraps around X^N either way
        span = params.n // 2 if span is None else span
        if span not in (params.n // 2, params.n):
            raise ConfigError("crisp/ckks: the row layout spans N/2 or N coefficients")
        self.span = span
        c, n_o = single_rows_layout(span, k_in, n_out)
        if n_rows > max(1, span // (c * (n_o + 1))):
            base = Budget(params, k, c * -(-k_in // c), c * n_o, -(-k_in // c), wbits, sigma)
            c, n_o = choose_rows_layout(params, base.level, base.drop, k_in, n_out, n_rows, span)
        self.c, self.n_o = c, n_o
        self.S = self.c * (self.n_o + 1)                      # row stride
        self.rows_per = max(1, span // self.S)
        self.n_chunks = -(-k_in // self.c)
        self.n_blocks = -(-n_out // self.n_o)
        super().__init__(params, k, self.c * self.n_chunks, self.c * self.n_o, self.n_chunks, wbits, sigma)


def single_rows_layout(half: int, k_in: int, n_out: int) -> tuple:
    """(c, n_o) of one sample in ``half`` (the span) coefficients: the widest input chunk
    (at most half of them), then as many outputs as fit."""
    c = min(k_in, half // 2)
    return c, max(1, min(n_out, half // c - 1))


# Cost model of ``choose_rows_layout`` in units of one ciphertext-plaintext multiply-add
# at the layer's level (measured on the 2-core machine, ckks-n14-q380-128: encrypting a
# client polynomial ~ 40 of them, masking + rescaling + trimming + decrypting an answer ~ 20,
# its mask ciphertext made offline ~ 30, counted half); one MB on the wire ~ 5.
COST_UP, COST_DOWN, COST_MASK_OFFLINE, COST_PER_MB = 40.0, 20.0, 15.0, 5.0
# Server memory: at most this many weight plaintexts per layer group (each (level + 1) N
# words: 128 MB at ckks-n14-q380-128 level 3; the mask ciphertexts it saves weigh more),
# unless the single-sample layout already needs more.
MAX_WEIGHT_POLYS = 256


def rows_layout_cost(params, level: int, drop: int, k_in: int, n_out: int, n_rows: int,
                     c: int, n_o: int, half: int) -> tuple:
    """(estimated cost, weight plaintexts) of the row layout (c, n_o) for n_rows rows in
    ``half`` (the span) coefficients."""
    rows_per = min(n_rows, max(1, half // (c * (n_o + 1))))
    n_rg, n_ch, n_bl = -(-n_rows // rows_per), -(-k_in // c), -(-n_out // n_o)
    mb_up = 2 * params.n * (params.q_level(level).bit_length()) / 8e6
    mb_down = params.n * (params.q_level(level - drop).bit_length()) / 8e6
    up, down = n_rg * n_ch, n_rg * n_bl
    cost = (up * (COST_UP + COST_PER_MB * mb_up) + down * (COST_DOWN + COST_MASK_OFFLINE + COST_PER_MB * mb_down)
            + up * n_bl)
    return cost, n_ch * n_bl


def choose_rows_layout(params, level: int, drop: int, k_in: int, n_out: int, n_rows: int,
                       half: int) -> tuple:
    """(c, n_o) for a batch of n_rows rows: fewer, fuller ciphertexts both ways. Many rows
    share one client polynomial (rows_per = floor(span / (c (n_o + 1)))), so narrower chunks
    and blocks trade more ciphertexts per row group for fewer row groups; the choice
    minimises ``rows_layout_cost`` (ties: the single-sample layout, then wider chunks)
    among layouts within ``MAX_WEIGHT_POLYS`` weight plaintexts. Public: both sides compute
    it from the plan."""
    c0, n0 = single_rows_layout(half, k_in, n_out)
    best_cost, pts0 = rows_layout_cost(params, level, drop, k_in, n_out, n_rows, c0, n0, half)
    cap = max(MAX_WEIGHT_POLYS, pts0)
    best = (best_cost, c0, n0)
    cs = sorted({-(-k_in // m) for m in range(1, k_in + 1)} & set(range(1, half // 2 + 1)), reverse=True)
    ns = sorted({-(-n_out // m) for m in range(1, n_out + 1)}, reverse=True)
    for c in cs:
        for n_o in ns:
            if c * (n_o + 1) > half:
                continue
            cost, pts = rows_layout_cost(params, level, drop, k_in, n_out, n_rows, c, n_o, half)
            if pts <= cap and cost < best[0] * (1 - 1e-9):
                best = (cost, c, n_o)
    return best[1], best[2]
