"""FSS gates on masked inputs: sign (DReLU), ReLU, arithmetic right shift, each with an
optional MAC twin for CRISP [CRISP III-B, Alg. 1-2, Fig. 1].

Setting (every gate). The value x lives in Z_2^n (n <= 64) and is additively shared between
P0 and P1. The dealer draws a mask r uniform in [0, 2^n) per element and gives each party a
share of r. Online, each party sends [x]_b + [r]_b mod 2^n (n bits) and receives the other
party's, so both learn x^ = x + r mod 2^n: one round, 2n bits per element in total
[CRISP Alg. 2 step 2]. Then each party evaluates its FSS key at x^ and combines the result
with its dealer shares locally. Outputs are additive shares in Z_2^k, k >= n: k = n for the
plain (semi-honest) ring, k = n + s for the lifted ring of the CRISP consistency check
[CRISP V-B, Cramer et al.]. In the lifted ring the outputs are the *signed* lifts: the
integer value of x in [-2^(n-1), 2^(n-1)) embedded in Z_2^k, and the MAC outputs are
mu * (that integer) mod 2^k.

Comparison core (derivation and proof in docs/fss.md). Write r = m 2^(n-1) + r_L and
x^ = x^_M 2^(n-1) + x^_L. The sign bit of x = x^ - r is MSB(x) = x^_M xor m xor b with the
borrow b = 1{x^_L < r_L}: a DCF on n-1 bits with alpha = r_L evaluated at x^_L [BCG+21
Sec. 4, sign via the lower n-1 bits]. With g = (1 - 2m) b and t = m + g = m xor b:

    drelu(x) = 1{x >= 0} = c - sigma t,           c = 1 - x^_M, sigma = 1 - 2 x^_M (public)
    x (signed lift)      = x^ - r + 2^n (m b - x^_M + x^_M t)
    ReLU(x)              = drelu (x^ - r) + 2^n c m b
                         = x^ c - sigma x^ (m + g) - c r + sigma (m r + g r) + 2^n c m b
    x >> f (floor)       = (x^ >> f) - (r >> f) - b_f + 2^(n-f) (m b - x^_M + x^_M t),
                           b_f = 1{x^ mod 2^f < r mod 2^f}   (a second DCF on f bits)

Every term is public x public-coefficient x (dealer share or DCF output), so each party
computes its output share locally. The DCF payload is the vector of the secret
coefficients multiplying b (g = (1-2m) b, m b, (1-2m) r b, ...). The MAC twin multiplies
every secret coefficient by the MAC key mu -- the paper's beta' = (mu, -mu r) of Alg. 1
[CRISP III-B] generalised to this decomposition -- and uses the *same* DCF tree (same alpha)
with a longer payload, so it costs no extra online communication and no extra tree walk.
The MAC of the input itself, mu x, comes from <mu>(x^) - <mu r> [CRISP Fig. 1 local
computation, Eq. (3)] plus the lifting correction 2^n mu (m b - x^_M + x^_M t).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from secinfer.crypto.fss.dcf import DCFKeys, DCFParams, dcf_eval, dcf_gen
from secinfer.arith.ring import Ring
from secinfer.errors import ConfigError, FrameError, SerializationError
from secinfer.spec import ArraySpec

KEY_FORMAT_VERSION = 2   # 2: DCF correction words stored level-major
_KINDS = ("sign", "relu", "ars", "spline")
_M64 = (1 << 64) - 1


def wire_dtype(n_bits: int) -> np.dtype:
    """Smallest unsigned dtype holding n bits: what a masked opening sends per element."""
    for dt in (np.uint8, np.uint16, np.uint32, np.uint64):
        if n_bits <= 8 * np.dtype(dt).itemsize:
            return np.dtype(dt)
    raise ConfigError(f"no wire dtype for {n_bits} bits")


@dataclass(frozen=True)
class GateCost:
    """Declared cost of one gate instance (one element), per party."""

    gate: str
    key_bytes: int              # one party's key for one element, as stored / sent by the dealer
    key_bits_paper: int         # the same in the papers' count (lambda = 128, bits not bytes)
    online_bits: int            # bits one party sends online per element (the ring element)
    online_wire_bytes: int      # bytes one party sends per element on the wire (whole dtype)
    rounds: int                 # online rounds
    messages: int               # online messages per party per batch
    dcf_levels: int             # PRG tree levels walked per element per party online

    def for_count(self, count: int) -> dict:
        return {"gate": self.gate, "count": count, "key_bytes": self.key_bytes * count,
                "online_bits_per_party": self.online_bits * count,
                "online_payload_bytes_per_party": self.online_wire_bytes * count,
                "rounds": self.rounds, "messages_per_party": self.messages}


@dataclass
class GateKey:
    """One party's preprocessing for a batch of ``count`` gate instances."""

    gate: "FSSGate"
    party: int
    count: int
    dcfs: list                                   # list[DCFKeys], one per DCF of the gate
    shares: dict = field(default_factory=dict)   # name -> (count, L) uint64 in Z_2^k

    kind = "fss-gate-key"

    # ---- named arrays (for the preprocessing store / npz) -----------------------------
    def to_arrays(self) -> dict:
        out = {"meta": self.gate.meta(self.party, self.count)}
        for j, d in enumerate(self.dcfs):
            for name, a in d.arrays().items():
                out[f"dcf{j}.{name}"] = a
        for name in self.gate.dealer_fields:
            out[f"sh.{name}"] = self.gate.group.pack(self.shares[name])
        return out

    @classmethod
    def from_arrays(cls, arrays: dict, expect: "FSSGate | None" = None,
                    party: int | None = None) -> "GateKey":
        if "meta" not in arrays:
            raise SerializationError("FSS gate key: missing 'meta' array")
        gate, p, count = FSSGate.from_meta(arrays["meta"])
        if expect is not None and gate.spec() != expect.spec():
            raise SerializationError(f"FSS gate key is for {gate.spec()}, expected {expect.spec()}")
        if party is not None and p != party:
            raise SerializationError(f"FSS gate key belongs to party {p}, expected party {party}")
        dcfs = []
        for j, dp in enumerate(gate.dcf_params):
            sub = {f: arrays.get(f"dcf{j}.{f}") for f in DCFKeys.FIELDS}
            dcfs.append(DCFKeys.from_arrays(dp, p, sub, count))
        g, shares = gate.group, {}
        for name in gate.dealer_fields:
            a = arrays.get(f"sh.{name}")
            if a is None or a.dtype != np.uint8 or a.shape != (count, g.nbytes):
                raise SerializationError(f"FSS gate key: dealer share {name!r} malformed or missing")
            v = g.unpack(a)
            if not g.is_reduced(v):
                raise SerializationError(f"FSS gate key: dealer share {name!r} exceeds Z_2^{g.bits}")
            shares[name] = v
        extra = set(arrays) - {"meta"} - {f"dcf{j}.{f}" for j in range(len(dcfs)) for f in DCFKeys.FIELDS} \
            - {f"sh.{nm}" for nm in gate.dealer_fields}
        if extra:
            raise SerializationError(f"FSS gate key: unexpected fields {sorted(extra)}")
        return cls(gate, p, count, dcfs, shares)

    # ---- ordered arrays (for Endpoint messages and the codec) -------------------------
    def ordered_arrays(self) -> list:
        arrs = self.to_arrays()
        return [arrs[name] for name in self.gate.field_order()]

    def to_bytes(self) -> bytes:
        """'meta' (8 little-endian uint64) then every other array's raw little-endian bytes in
        ``field_order``; each shape and dtype follows from meta (``key_specs``), so the
        format needs no per-array header."""
        return self.to_buffer().tobytes()

    def to_buffer(self) -> np.ndarray:
        """The bytes of ``to_bytes`` as one flat uint8 array, written with a single copy of
        each field (what a dealer sends: no intermediate bytes objects to join)."""
        arrays = self.ordered_arrays()
        buf = np.empty(sum(a.nbytes for a in arrays), np.uint8)
        off = 0
        for a in arrays:
            le = np.dtype(a.dtype).newbyteorder("<")
            np.copyto(buf[off:off + a.nbytes].view(le).reshape(a.shape), a, casting="equiv")
            off += a.nbytes
        return buf

    @classmethod
    def from_bytes(cls, data: bytes, expect: "FSSGate | None" = None, party: int | None = None) -> "GateKey":
        if isinstance(data, np.ndarray):      # a received frame: read it in place, no extra copy
            if data.dtype != np.uint8 or data.ndim != 1:
                raise SerializationError("FSS gate key bytes must be a flat uint8 array")
            data = np.ascontiguousarray(data)
        else:
            data = bytes(data)
        if len(data) < 64:
            raise SerializationError(f"FSS gate key bytes: {len(data)} bytes, shorter than the 64-byte header")
        gate, _, count = FSSGate.from_meta(np.frombuffer(data[:64], dtype="<u8").astype(np.uint64))
        specs = gate.key_specs(count)
        sizes = [int(np.prod(sp.shape)) * np.dtype(sp.dtype).itemsize for sp in specs]
        if len(data) != sum(sizes):
            raise SerializationError(f"FSS gate key bytes: {len(data)} bytes, the header announces {sum(sizes)}")
        arrays, off = [], 0
        for sp, size in zip(specs, sizes):
            dt = np.dtype(sp.dtype)
            raw = np.frombuffer(data, dtype=dt.newbyteorder("<"), count=size // dt.itemsize, offset=off)
            arrays.append(raw.astype(dt, copy=True).reshape(sp.shape))
            off += size
        return cls.from_arrays(dict(zip(gate.field_order(), arrays)), expect, party)

    def nbytes(self) -> int:
        """Key material bytes (everything except the small 'meta' header array)."""
        return sum(a.nbytes for k, a in self.to_arrays().items() if k != "meta")


class FSSGate:
    """Base of the masked-input gates. Subclasses define DCFs, payloads, dealer fields, outputs."""

    kind = "base"

    def __init__(self, n_bits: int, out_bits: int | None = None, mac: bool = False, frac_bits: int = 0):
        if not 2 <= n_bits <= 64:
            raise ConfigError(f"gate input ring must be Z_2^n with 2 <= n <= 64, got n = {n_bits}")
        out_bits = n_bits if out_bits is None else out_bits
        if not n_bits <= out_bits <= 128:
            raise ConfigError(f"gate output ring Z_2^k needs n <= k <= 128, got k = {out_bits}")
        self.n, self.k, self.mac, self.f = n_bits, out_bits, bool(mac), int(frac_bits)
        self.group = Ring(out_bits)
        self.lifted = out_bits > n_bits

    # ---- declarative parts (overridden) ------------------------------------------------
    @property
    def payloads(self) -> list:
        """Per DCF: the names of its payload entries (each a dealer-side coefficient of b)."""
        raise NotImplementedError

    @property
    def dcf_domains(self) -> list:
        raise NotImplementedError

    @property
    def dealer_fields(self) -> tuple:
        raise NotImplementedError

    @property
    def outputs(self) -> tuple:
        raise NotImplementedError

    # ---- derived -----------------------------------------------------------------------
    def spec(self) -> tuple:
        return (self.kind, self.n, self.k, self.f, self.mac)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n={self.n}, k={self.k}, f={self.f}, mac={self.mac})"

    def entry_bits(self, name: str) -> int:
        """Bits a payload entry needs: all of k unless the gate only uses it times 2^e."""
        return self.k

    @property
    def dcf_params(self) -> list:
        return [DCFParams(d, self.k, len(p), tuple(self.entry_bits(nm) for nm in p))
                for d, p in zip(self.dcf_domains, self.payloads)]

    def meta(self, party: int, count: int) -> np.ndarray:
        return np.array([KEY_FORMAT_VERSION, _KINDS.index(self.kind), party, self.n, self.k, self.f,
                         int(self.mac), count], np.uint64)

    @staticmethod
    def from_meta(meta) -> tuple:
        meta = np.asarray(meta)
        if meta.dtype != np.uint64 or meta.shape != (8,):
            raise SerializationError("FSS gate key: malformed 'meta' array")
        ver, kind, party, n, k, f, mac, count = (int(v) for v in meta)
        if ver != KEY_FORMAT_VERSION:
            raise SerializationError(f"FSS gate key format version {ver} not supported")
        if kind >= len(_KINDS) or party > 1 or mac > 1 or not 0 < count <= 1 << 28:
            raise SerializationError("FSS gate key: invalid header values")
        try:
            if _KINDS[kind] == "spline":
                gate = make_gate("spline", n, k, mac=bool(mac), degree=f)
            else:
                gate = make_gate(_KINDS[kind], n, k, mac=bool(mac), frac_bits=f)
        except ConfigError as e:
            raise SerializationError(f"FSS gate key: invalid gate parameters: {e}") from None
        return gate, party, count

    def field_order(self) -> list:
        names = ["meta"]
        for j in range(len(self.dcf_domains)):
            names += [f"dcf{j}.{f}" for f in DCFKeys.FIELDS]
        return names + [f"sh.{nm}" for nm in self.dealer_fields]

    def key_specs(self, count: int) -> list:
        """ArraySpecs of ``GateKey.ordered_arrays()`` for receiving a key over an Endpoint."""
        specs = [ArraySpec(np.uint64, (8,))]
        for dp in self.dcf_params:
            specs += [ArraySpec(dt, shape) for shape, dt in DCFKeys.stored_shapes(dp, count).values()]
        return specs + [ArraySpec(np.uint8, (count, self.group.nbytes)) for _ in self.dealer_fields]

    def cost(self) -> GateCost:
        dps = self.dcf_params
        key = sum(dp.nbytes_per_key() for dp in dps) + len(self.dealer_fields) * self.group.nbytes
        paper = sum(dp.n * (128 + 2 + sum(dp.bits)) + 128 + sum(dp.bits) for dp in dps) \
            + len(self.dealer_fields) * self.k
        return GateCost(self.kind + ("-mac" if self.mac else ""), key, paper, self.n,
                        wire_dtype(self.n).itemsize, 1, 1, sum(dp.n for dp in dps))

    # ---- offline: key generation (the dealer) ------------------------------------------
    def gen(self, prg, count: int, mac_key=None) -> tuple[GateKey, GateKey]:
        """Keys for ``count`` instances, all randomness from the injected PRG [CRISP Fig. 3].

        ``mac_key`` (MAC gates only): mu in Z_2^k, a Python int or a (count, L) array.
        """
        if count < 1:
            raise ConfigError("gate key batch needs count >= 1")
        g = self.group
        if self.mac:
            if mac_key is None:
                raise ConfigError(f"{self!r} needs the MAC key mu")
            mu = np.asarray(mac_key, np.uint64) if isinstance(mac_key, np.ndarray) else g.from_int(int(mac_key))
            mu = g.reduce(np.broadcast_to(mu, (count, g.limbs)).copy())
        elif mac_key is not None:
            raise ConfigError(f"{self!r} has no MAC twin; do not pass a MAC key")
        else:
            mu = None
        r = prg.ring((count,), self.n)
        vals = self._secret_values(r, mu)
        dcfs = ([], [])
        for j, (dp, names) in enumerate(zip(self.dcf_params, self.payloads)):
            alpha = self._dcf_alpha(j, r)
            beta = np.stack([vals[nm] for nm in names], axis=1)
            k0, k1 = dcf_gen(dp, prg, alpha, beta)
            dcfs[0].append(k0), dcfs[1].append(k1)
        sh0, sh1 = {}, {}
        for name in self.dealer_fields:
            s0 = g.random(prg, (count,))
            sh0[name], sh1[name] = s0, g.sub(vals[name], s0)
        return GateKey(self, 0, count, dcfs[0], sh0), GateKey(self, 1, count, dcfs[1], sh1)

    def _secret_values(self, r: np.ndarray, mu) -> dict:
        """Every dealer-side value (as Z_2^k elements) the gate's fields and payloads use."""
        g, n = self.group, self.n
        m = (r >> np.uint64(n - 1)) & np.uint64(1)
        one = g.from_u64(np.ones_like(r))
        r_e, m_e = g.from_u64(r), g.from_u64(m)
        sgn = g.cond_neg(one, m)                            # 1 - 2m
        v = {"r": r_e, "m": m_e, "mr": g.select(m, r_e), "one": one,
             "g": sgn, "mb": m_e, "gr": g.cond_neg(r_e, m)}
        if self.f:
            v["r_hi"] = g.from_u64(r >> np.uint64(self.f))
        if mu is not None:
            for name in list(v):
                v["mu_" + name] = g.mul(mu, v[name])
            v["mu"] = mu
        return v

    def _dcf_alpha(self, j: int, r: np.ndarray) -> np.ndarray:
        dom = self.dcf_domains[j]
        return r & np.uint64((1 << dom) - 1)

    # ---- online ------------------------------------------------------------------------
    def _check_key(self, key: GateKey, x_shape) -> None:
        if key.gate.spec() != self.spec():
            raise ConfigError(f"key for {key.gate!r} used with {self!r}")
        size = int(np.prod(x_shape, dtype=np.int64))
        if size != key.count:
            raise ConfigError(f"{self!r}: key batch holds {key.count} instances, input has {size}")

    def masked_share(self, key: GateKey, x_share: np.ndarray) -> np.ndarray:
        """[x]_b + [r]_b mod 2^n, the message of the single online round [CRISP Alg. 2 step 2]."""
        x_share = np.asarray(x_share, np.uint64)
        self._check_key(key, x_share.shape)
        mask = np.uint64(_M64 if self.n == 64 else (1 << self.n) - 1)
        r_low = key.shares["r"][:, 0]
        return ((x_share.reshape(-1) + r_low) & mask).astype(wire_dtype(self.n))

    @staticmethod
    def _pieces(key) -> list:
        """A key batch, or the list of consecutive pieces one batch was delivered in."""
        keys = list(key) if isinstance(key, (list, tuple)) else [key]
        if not keys:
            raise ConfigError("no gate key given")
        return keys

    def _split(self, keys: list, flat: np.ndarray) -> list:
        if sum(k.count for k in keys) != flat.shape[0]:
            raise ConfigError(f"{self!r}: key pieces hold {sum(k.count for k in keys)} instances, "
                              f"input has {flat.shape[0]}")
        return np.split(flat, np.cumsum([k.count for k in keys])[:-1])

    def open_masked(self, ep, peer: str, key, x_share: np.ndarray, tag: str) -> np.ndarray:
        """Send our masked share, receive the peer's, return x^ = x + r mod 2^n (uint64, flat).
        ``key``: one key batch or the list of its pieces (one message either way)."""
        keys = self._pieces(key)
        parts = self._split(keys, np.asarray(x_share, np.uint64).reshape(-1))
        mine = np.concatenate([self.masked_share(k, p) for k, p in zip(keys, parts)])
        ep.send(peer, tag, mine)
        (theirs,) = ep.recv(peer, tag, ArraySpec(wire_dtype(self.n), (mine.shape[0],)))
        if self.n % 8 and np.any(theirs.astype(np.uint64) >> np.uint64(self.n)):
            raise FrameError(f"{ep.me} <- {peer} [{tag}]: masked value exceeds {self.n} bits")
        mask = np.uint64(_M64 if self.n == 64 else (1 << self.n) - 1)
        return (mine.astype(np.uint64) + theirs.astype(np.uint64)) & mask

    def online(self, ep, peer: str, key, x_share: np.ndarray, tag: str) -> dict:
        """The whole online phase for this party: one round, then local evaluation (piece by
        piece when ``key`` is a list of pieces, so only one piece is expanded at a time)."""
        shape = np.asarray(x_share).shape
        keys = self._pieces(key)
        xhat = self.open_masked(ep, peer, keys, x_share, tag)
        outs = [self.eval_local(k, xh) for k, xh in zip(keys, self._split(keys, xhat))]
        out = {name: np.concatenate([o[name] for o in outs]) if len(outs) > 1 else outs[0][name]
               for name in outs[0]}
        return {k: v.reshape(shape + (self.group.limbs,)) for k, v in out.items()}

    def eval_local(self, key: GateKey, xhat: np.ndarray) -> dict:
        """Output shares from the public x^ (flat uint64 < 2^n) and this party's key."""
        xhat = np.asarray(xhat, np.uint64).reshape(-1)
        self._check_key(key, xhat.shape)
        if self.n < 64 and np.any(xhat >> np.uint64(self.n)):
            raise ConfigError(f"masked input exceeds {self.n} bits")
        dcf_out = []
        for j, dp in enumerate(self.dcf_params):
            pts = xhat & np.uint64((1 << dp.n) - 1)
            dcf_out.append(dcf_eval(key.dcfs[j], pts))
        sh = dict(key.shares)
        for names, vals in zip(self.payloads, dcf_out):
            for i, nm in enumerate(names):
                sh["b_" + nm] = vals[:, i]
        return self._combine(key.party, xhat, sh)

    def _combine(self, party: int, xhat: np.ndarray, sh: dict) -> dict:
        raise NotImplementedError

    # ---- shared pieces of the combination ----------------------------------------------
    def _pub(self, party: int, u: np.ndarray) -> np.ndarray:
        """A public value as party ``party``'s share (P0 holds it, P1 holds 0)."""
        g = self.group
        return g.from_u64(u) if party == 0 else g.zeros(u.shape)

    def _t_share(self, sh: dict, prefix: str = "") -> np.ndarray:
        """Share of t = m xor b = m + g (times mu with prefix 'mu_')."""
        return self.group.add(sh[prefix + "m"], sh["b_" + prefix + "g"])

    def _lift_correction(self, party, xm, sh, prefix: str = "") -> np.ndarray:
        """Share of (m b - x^_M + x^_M t) (times mu with prefix 'mu_'): the 2^n wrap term."""
        g = self.group
        base = sh["mu"] if prefix else self._pub(party, np.ones_like(xm))
        return g.sub(g.add(sh["b_" + prefix + "mb"], g.select(xm, self._t_share(sh, prefix))), g.select(xm, base))

    def _lift(self, party, xhat, xm, sh, prefix):
        """Shares of x (prefix "") or mu x (prefix "mu_") from the opened x^ = x + r:
        x = x^ - r + 2^n (m b - x^_M + x^_M t) in the lifted ring (gates with an "r" field)."""
        g = self.group
        lead = g.mul_u64(sh["mu"], xhat) if prefix else self._pub(party, xhat)
        out = g.sub(lead, sh[prefix + "r"])
        if self.lifted:
            out = g.add(out, g.shl(self._lift_correction(party, xm, sh, prefix), self.n))
        return out


class SignGate(FSSGate):
    """DReLU: shares of 1{x >= 0} (and mu * 1{x >= 0}) [BCG+21 Sec. 4; CRISP Alg. 1 core]."""

    kind = "sign"

    @property
    def dcf_domains(self):
        return [self.n - 1]

    @property
    def payloads(self):
        return [["g"] + (["mu_g"] if self.mac else [])]

    @property
    def dealer_fields(self):
        return ("r", "m") + (("mu", "mu_m") if self.mac else ())

    @property
    def outputs(self):
        return ("drelu",) + (("mu_drelu",) if self.mac else ())

    def _combine(self, party, xhat, sh):
        g = self.group
        xm = (xhat >> np.uint64(self.n - 1)) & np.uint64(1)
        c = np.uint64(1) - xm
        out = {"drelu": g.sub(self._pub(party, c), g.cond_neg(self._t_share(sh), xm))}
        if self.mac:
            out["mu_drelu"] = g.sub(g.select(c, sh["mu"]), g.cond_neg(self._t_share(sh, "mu_"), xm))
        return out


class ReluGate(FSSGate):
    """ReLU with its MAC twin: shares of ReLU(x), x, and (mac) mu ReLU(x), mu x
    [CRISP Alg. 1-2, Fig. 1]. One DCF on n-1 bits; one round of n bits per party."""

    kind = "relu"

    @property
    def dcf_domains(self):
        return [self.n - 1]

    @property
    def payloads(self):
        base = ["g", "gr"] + (["mb"] if self.lifted else [])
        return [base + (["mu_" + p for p in base] if self.mac else [])]

    @property
    def dealer_fields(self):
        return ("r", "m", "mr") + (("mu", "mu_m", "mu_r", "mu_mr") if self.mac else ())

    def entry_bits(self, name):
        return self.k - self.n if name.endswith("mb") else self.k      # used times 2^n only

    @property
    def outputs(self):
        return ("relu", "x") + (("mu_relu", "mu_x") if self.mac else ())

    def _relu(self, party, xhat, xm, c, sh, prefix):
        g = self.group
        # ReLU = x^ c - sigma x^ t - c r + sigma (m r + g r) + 2^n c m b
        lead = g.mul_u64(sh["mu"], xhat * c) if prefix else self._pub(party, xhat * c)
        t_term = g.mul_u64(self._t_share(sh, prefix), xhat)
        r_term = g.add(sh[prefix + "mr"], sh["b_" + prefix + "gr"])
        out = g.sub(g.add(lead, g.cond_neg(g.sub(r_term, t_term), xm)), g.select(c, sh[prefix + "r"]))
        if self.lifted:
            out = g.add(out, g.shl(g.select(c, sh["b_" + prefix + "mb"]), self.n))
        return out

    def _combine(self, party, xhat, sh):
        xm = (xhat >> np.uint64(self.n - 1)) & np.uint64(1)
        c = np.uint64(1) - xm
        out = {"relu": self._relu(party, xhat, xm, c, sh, ""), "x": self._lift(party, xhat, xm, sh, "")}
        if self.mac:
            out["mu_relu"] = self._relu(party, xhat, xm, c, sh, "mu_")
            out["mu_x"] = self._lift(party, xhat, xm, sh, "mu_")
        return out


class ArsGate(FSSGate):
    """Arithmetic right shift by f (flooring, = FixedPointConfig.trunc) with MAC twin:
    shares of x >> f, x, and (mac) mu (x >> f), mu x. Exact, one round of n bits per party.
    DCF 0 on n-1 bits (sign/wrap of x), DCF 1 on f bits (borrow of the dropped bits)
    [BCG+21 Sec. 5 ARS gate, re-derived for the lifted ring in docs/fss.md]."""

    kind = "ars"

    def __init__(self, n_bits, out_bits=None, mac=False, frac_bits=0):
        super().__init__(n_bits, out_bits, mac, frac_bits)
        if not 1 <= self.f <= self.n - 2:
            raise ConfigError(f"ARS shift must be in 1..n-2, got f = {self.f} for n = {self.n}")

    @property
    def dcf_domains(self):
        return [self.n - 1, self.f]

    @property
    def payloads(self):
        mu = self.mac
        return [["g", "mb"] + (["mu_g", "mu_mb"] if mu else []), ["one"] + (["mu_one"] if mu else [])]

    @property
    def dealer_fields(self):
        return ("r", "m", "r_hi") + (("mu", "mu_m", "mu_r", "mu_r_hi") if self.mac else ())

    def entry_bits(self, name):
        return self.k - self.n + self.f if name.endswith("mb") else self.k   # used times 2^(n-f) only

    @property
    def outputs(self):
        return ("y", "x") + (("mu_y", "mu_x") if self.mac else ())

    def _shifted(self, party, xhat, xm, sh, prefix):
        g = self.group
        hi = xhat >> np.uint64(self.f)
        lead = g.mul_u64(sh["mu"], hi) if prefix else self._pub(party, hi)
        out = g.sub(g.sub(lead, sh[prefix + "r_hi"]), sh["b_" + prefix + "one"])
        return g.add(out, g.shl(self._lift_correction(party, xm, sh, prefix), self.n - self.f))

    def _combine(self, party, xhat, sh):
        xm = (xhat >> np.uint64(self.n - 1)) & np.uint64(1)
        out = {"y": self._shifted(party, xhat, xm, sh, ""), "x": self._lift(party, xhat, xm, sh, "")}
        if self.mac:
            out["mu_y"] = self._shifted(party, xhat, xm, sh, "mu_")
            out["mu_x"] = self._lift(party, xhat, xm, sh, "mu_")
        return out


_GATES = {"sign": SignGate, "relu": ReluGate, "ars": ArsGate}


def make_gate(kind: str, n_bits: int, out_bits: int | None = None, *, mac: bool = False,
              frac_bits: int = 0, degree: int = 0, pieces=None) -> FSSGate:
    """Gate by name: 'sign', 'relu', 'ars' (needs frac_bits = the shift f), 'spline'
    (public pieces [(p, q, coeffs)], polynomial degree <= ``degree``; see spline.py)."""
    if kind == "spline":
        from secinfer.crypto.fss.spline import SplineGate
        if frac_bits:
            raise ConfigError("gate 'spline' takes no shift amount")
        return SplineGate(n_bits, out_bits, mac, degree, pieces)
    if degree or pieces is not None:
        raise ConfigError(f"gate {kind!r} takes no spline pieces")
    try:
        cls = _GATES[kind]
    except KeyError:
        raise ConfigError(f"unknown FSS gate {kind!r}; known: {sorted(_GATES) + ['spline']}") from None
    if kind != "ars" and frac_bits:
        raise ConfigError(f"gate {kind!r} takes no shift amount")
    return cls(n_bits, out_bits, mac, frac_bits)
