"""Named CKKS/RLWE parameter sets and the loaded parameter object (keys, encode, encrypt).

Security levels follow the Homomorphic Encryption Standard (Albrecht et al., 2018),
Table 1 for ternary secrets, classical 128-bit column: the largest log2(Q*P) allowed
for ring dimension N is 27, 54, 109, 218, 438, 881 for logN = 10..15. A set claims 128
bits only if its total modulus fits that bound; sets that do not are named ``insecure``
and exist for fast tests only (the CLI refuses them).
"""

from __future__ import annotations

import ctypes as C
import hashlib
import json
import threading
from dataclasses import dataclass, field

import numpy as np

from secinfer.native import lib as N
from secinfer.crypto.he.errors import HEArgumentError, ParameterMismatchError
from secinfer.crypto.he.objects import (
    Ciphertext, EvalKeys, HEObject, Plaintext, PublicKey, SecretKey, load,
)
from secinfer.errors import ConfigError, InsecureParametersError

# [HE Standard, Table 1, ternary secret, 128-bit classical]: logN -> max log2(QP)
HE_STANDARD_128 = {10: 27, 11: 54, 12: 109, 13: 218, 14: 438, 15: 881}

# Beyond the Standard's table, for the bootstrapping extension of a dense-ternary set
# [Bossuat et al., "Security Guidelines for Implementing Homomorphic Encryption",
# ia.cr/2024/463, and OpenFHE's HEStd_ternary / HEStd_128_classic table]: logN -> max
# log2(QP) at 128-bit classical security for a uniform ternary secret. Only
# ``Bootstrapper`` checks it (``security_bits`` below keeps the logN = 15 bound for N > 2^15).
HE_STANDARD_128_EXT = {16: 1747, 17: 3523}

# A key-switching digit may exceed P by at most this many bits (the key-switch noise then
# stays below ~2^(10 + logN/2 + 2) ~ 2^19 at N = 2^14, far under a 2^40 scale).
KEY_SWITCH_MAX_GAP = 10

# Error distribution: discrete Gaussian sigma = 3.2 (Lattigo default, as in the Standard);
# secret: ternary with P(+-1) = 2/3 (Lattigo default).
ERROR_SIGMA = 3.2


@dataclass(frozen=True)
class ParamSpec:
    name: str
    log_n: int
    log_q: tuple[int, ...]
    log_p: tuple[int, ...]
    log_scale: int
    note: str = ""
    key_base2: int = 0      # > 0: no special prime; key switching with base-2^key_base2 digits
    secret_h: int = 0       # > 0: sparse ternary secret of this Hamming weight (bootstrappable sets)
    # bootstrappable with a dense ternary secret: the special primes of the bootstrapping
    # extension (empty: Lattigo's default four 61-bit primes) and the slots bootstrapped
    # (0: N / 2); see secinfer.crypto.he.bootstrap
    boot_log_p: tuple[int, ...] = ()
    boot_log_slots: int = 0
    log_qp: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "log_qp", sum(self.log_q) + sum(self.log_p))

    @property
    def bootstrappable(self) -> bool:
        return self.secret_h > 0 or bool(self.boot_log_p)

    @property
    def insecure(self) -> bool:
        return "insecure" in self.name

    @property
    def key_switch_gap_bits(self) -> int:
        """How many bits the largest key-switching digit exceeds P: Lattigo's hybrid key
        switching splits Q into digits of len(log_p) consecutive primes, and its noise is
        about 2^(digit bits - log P) * sqrt(N) * sigma, so a P much smaller than a digit
        makes every rotation and relinearisation inaccurate."""
        if self.key_base2:
            return self.key_base2
        k = len(self.log_p)
        digits = [sum(self.log_q[i:i + k]) for i in range(0, len(self.log_q), k)]
        return max(digits) - sum(self.log_p)

    @property
    def key_switching(self) -> bool:
        """False when P is more than KEY_SWITCH_MAX_GAP bits below a digit (e.g.
        ckks-n13-q195-128: 60-bit digit, 22-bit P: a 784x128 matvec was off by 2.2e4,
        issue 22 item 8): such a set refuses rotation and relinearisation keys."""
        if self.key_base2:
            # digit-decomposition key switching (noise ~2^w sqrt(l N) sigma, no P): accurate
            # enough for the coefficient-domain sets it is used for, whose packing profiles
            # budget that noise (secinfer.crypto.he.packing, tests/he/test_packing.py)
            return True
        return self.key_switch_gap_bits <= KEY_SWITCH_MAX_GAP

    @property
    def security_bits(self) -> int:
        """128 if log2(QP) fits the HE Standard bound for this N, else 0 (no claim)."""
        # beyond the Standard's table (logN > 15) its logN = 15 bound is a conservative one:
        # the allowed modulus only grows with N
        bound = HE_STANDARD_128.get(min(self.log_n, 15))
        return 128 if bound is not None and self.log_qp <= bound else 0


PARAMETER_SETS: dict[str, ParamSpec] = {s.name: s for s in (
    # 128-bit sets (log2 QP <= Standard bound).
    ParamSpec("ckks-n13-128", 13, (60, 40, 40), (61,), 40,
              "2 multiplicative levels, 4096 slots; logQP = 201 <= 218"),
    ParamSpec("ckks-n14-128", 14, (60, 40, 40, 40, 40, 40, 40), (61, 61), 40,
              "6 levels, 8192 slots; logQP = 422 <= 438"),
    # crisp's exact coefficient packing uses Q only (no key switching): a longer Q chain and
    # one small P prime, still within the Standard's bound counted over Q * P
    ParamSpec("ckks-n14-q380-128", 14, (60,) + (40,) * 8, (57,), 40,
              "8 levels, Q = 380 bits for one 104-bit digit per share; logQP = 437 <= 438"),
    # the same idea at N = 2^13 (crisp's Table I ring size): the longest Q the Standard
    # allows there with one small P prime
    ParamSpec("ckks-n13-q195-128", 13, (60, 45, 45, 45), (22,), 40,
              "3 levels, Q = 195 bits (crisp FC layers at N = 2^13); logQP = 217 <= 218"),
    # SAFHIRE's coefficient-domain RLWE/LWE sets [SAFHIRE Table 2]: one 53-bit Q prime
    # (level 0, no rescaling), no special prime: the automorphism key switches of packing
    # use base-2^w digits (w = 27: 2 digits, b = 8; w = 18: 3 digits, b = 12; w = 11: 5
    # digits, b = 16), like the paper's (D, l) gadget. log2 Q = 53.000004 <= 54 (HE
    # Standard, N = 2^11, ternary secret, 128-bit classical). Profiles in
    # secinfer.crypto.he.packing.
    ParamSpec("rlwe-n11-q53-w27-128", 11, (53,), (), 36,
              "SAFHIRE b = 8: N = 2^11, logQ = 53 <= 54, key switching with 27-bit digits",
              key_base2=27),
    ParamSpec("rlwe-n11-q53-w18-128", 11, (53,), (), 36,
              "SAFHIRE b = 12: N = 2^11, logQ = 53 <= 54, key switching with 18-bit digits",
              key_base2=18),
    # b = 16 [SAFHIRE Table 2: the same noise level as b = 12 with a finer gadget, D = 310,
    # l = 5 / 4 digits]: the same ring and prime with 11-bit digits (ceil(53 / 11) = 5), so
    # a key switch adds ~2^7 less noise. A partial ciphertext (fewer than N values, every
    # round of a small model, the last rounds of a ResNet) keeps its last key switches'
    # noise whole: measured at N = 2^11, 64 values, max 2^27.7-2^28.3 with 18-bit digits,
    # 2^21.4-2^21.7 with 11-bit digits, against Delta = 2^31-2^33 for 16-bit models
    # (docs/protocols/safhire.md, "Parameters and noise").
    ParamSpec("rlwe-n11-q53-w11-128", 11, (53,), (), 36,
              "SAFHIRE b = 16: N = 2^11, logQ = 53 <= 54, key switching with 11-bit digits (5)",
              key_base2=11),
    # --- certified data (CRISP-certified Sec. 6.2, smart metering; owned by the certified
    # protocol): the paper's ring N = 2^11 with a single-prime modulus (the paper: log q =
    # 45 at a 25-bit precision; here one 53-bit prime, log2 Q = 53.000004 <= 54 (HE
    # Standard, N = 2^11, ternary secret: 128-bit), for the headroom of the release's
    # blinding). No special prime: rotations key-switch with base-2^4 digits (14 digits),
    # whose noise at the paper's scale 2^25 stays near 0.2 Wh per slot after psi's 10
    # rotations (1,024 readings; 2.5 Wh with 2^8 digits, 136 Wh with 2^14).
    ParamSpec("ckks-n11-q53-w4-128", 11, (53,), (), 25,
              "certified smart metering: N = 2^11, one prime, logQ = 53 <= 54, 1024 slots",
              key_base2=4),
    # The fully encrypted baseline's residual chain [SAFHIRE Sec. 6 baseline, ORION-style]:
    # Lattigo's bootstrapping example's residual set shortened to eight 40-bit levels (a
    # degree-63 ReLU polynomial, 7 levels, plus one linear layer between bootstraps; fewer
    # primes make every rotation key smaller), 55-bit q0, three 61-bit P primes, sparse
    # ternary secret H = 192. logQP = 558 here; the bootstrapping circuit extends the chain
    # (secinfer.crypto.he.bootstrap says whose security figure covers that).
    ParamSpec("ckks-boot-n16-128", 16, (55,) + (40,) * 8, (61, 61, 61), 40,
              "bootstrappable: N = 2^16, 2^15 slots, 8 levels between bootstraps; residual "
              "logQP = 558", secret_h=192),
    # The baseline's set that runs ResNet-20 end to end on a 23 GB machine (docs/he.md,
    # "Bootstrapping at N = 2^16"): the same residual Q as ckks-boot-n16-128, but a DENSE
    # ternary secret (Lattigo's encapsulation switches to a weight-32 sparse secret around
    # ModRaise only) and nine 42-bit P primes (one key-switching digit: a rotation key is
    # 2 x 18 limbs, 19 MB, instead of 2 x 3 x 12 limbs, 38 MB). The bootstrapping extension
    # has eight 61-bit P primes (dnum 3: 5.0 GB of bootstrapping keys instead of 8.8 GB with
    # Lattigo's four). Residual logQP = 753 <= 881; extended logQP = 1684 <= 1747
    # (HE_STANDARD_128_EXT, N = 2^16, ternary secret, 128-bit classical).
    ParamSpec("ckks-boot-n16-dense-128", 16, (55,) + (40,) * 8, (42,) * 9, 40,
              "bootstrappable, dense ternary secret: N = 2^16, 2^15 slots, 8 levels between "
              "bootstraps; residual logQP = 753, extended 1684 <= 1747",
              boot_log_p=(61,) * 8),
    # Fast sets for tests only: the ring is far too small for the modulus.
    ParamSpec("rlwe-n9-insecure", 9, (53,), (), 30,
              "tests only: rlwe-n11-q53-w18-128's modulus and digits on a tiny ring", key_base2=18),
    ParamSpec("rlwe-n9-w11-insecure", 9, (53,), (), 30,
              "tests only: rlwe-n11-q53-w11-128's modulus and digits on a tiny ring", key_base2=11),
    ParamSpec("ckks-n10-insecure", 10, (60, 40, 40), (61,), 40, "tests only"),
    ParamSpec("ckks-n11-insecure", 11, (60, 40, 40), (61,), 40, "tests only"),
    ParamSpec("ckks-n12-insecure", 12, (60, 40, 40, 40), (61,), 40, "tests only"),
    ParamSpec("ckks-n12-wide-insecure", 12, (60, 40, 40, 40, 40, 40, 40), (61, 61), 40,
              "tests only: the modulus chain of ckks-n14-128 on a small ring"),
    ParamSpec("ckks-boot-n12-insecure", 12, (55,) + (40,) * 6, (61, 61, 61), 40,
              "tests only: bootstrappable chain on a tiny ring", secret_h=32),
    ParamSpec("ckks-boot-n13-insecure", 13, (55,) + (40,) * 8, (61, 61, 61), 40,
              "bench only: ckks-boot-n16-128's chain on a ring whose bootstrapping keys fit "
              "a shared machine (cost measured here, scaled to N = 2^16)", secret_h=192),
    ParamSpec("ckks-boot-n12-dense-insecure", 12, (55,) + (40,) * 6, (42,) * 7, 40,
              "tests only: ckks-boot-n16-dense-128's shape (dense secret, one-digit residual "
              "keys, eight-prime extension) on a tiny ring",
              boot_log_p=(61,) * 8),
    ParamSpec("ckks-n12-q380-insecure", 12, (60,) + (40,) * 8, (57,), 40,
              "tests only: the modulus chain of ckks-n14-q380-128 on a small ring"),
)}

SECURE_SETS = tuple(n for n, s in PARAMETER_SETS.items() if not s.insecure)

_cache: dict[str, "CKKSParams"] = {}
_cache_lock = threading.Lock()


def get_params(name: str, allow_insecure: bool = True) -> "CKKSParams":
    """Load a named parameter set (cached per process)."""
    spec = PARAMETER_SETS.get(name)
    if spec is None:
        raise ConfigError(f"unknown HE parameter set {name!r}; known: {sorted(PARAMETER_SETS)}")
    if spec.insecure and not allow_insecure:
        raise InsecureParametersError(f"HE parameter set {name!r} is insecure (tests only)")
    with _cache_lock:
        if name not in _cache:
            _cache[name] = CKKSParams(spec)
        return _cache[name]


class KeyPair:
    def __init__(self, sk: SecretKey, pk: PublicKey) -> None:
        self.sk, self.pk = sk, pk

    def close(self) -> None:
        self.sk.close()
        self.pk.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class CKKSParams:
    """A loaded parameter set: the root every HE object is bound to."""

    def __init__(self, spec: ParamSpec) -> None:
        self.spec = spec
        self.name = spec.name
        lit_d = {"LogN": spec.log_n, "LogQ": list(spec.log_q), "LogP": list(spec.log_p),
                 "LogDefaultScale": spec.log_scale}
        if spec.key_base2:
            lit_d["KeyBase2"] = spec.key_base2
        if spec.secret_h:
            lit_d["XsH"] = spec.secret_h
        lit = json.dumps(lit_d).encode()
        self.handle = N.new_handle("he_boot_params_new" if spec.bootstrappable else "he_params_new", lit)
        info = np.zeros(5 + len(spec.log_q) + len(spec.log_p), dtype=np.uint64)
        N.call("he_params_info", self.handle, N.ptr(info, N.u64), len(info))
        self.n = int(info[0])
        self.log_n = spec.log_n
        self.max_level = int(info[1])
        self.max_slots = int(info[2])
        self.log_max_slots = self.max_slots.bit_length() - 1
        nq, npr = int(info[3]), int(info[4])
        self.q = tuple(int(v) for v in info[5:5 + nq])
        self.p = tuple(int(v) for v in info[5 + nq:5 + nq + npr])
        self.log_scale = spec.log_scale
        self.security_bits = spec.security_bits
        self.insecure = spec.insecure
        canon = json.dumps({"v": 1, "N": self.n, "Q": list(self.q), "P": list(self.p),
                            "scale": spec.log_scale, "sigma": ERROR_SIGMA}, sort_keys=True)
        if spec.key_base2:      # the evaluation-key layout differs: part of the identity
            canon += f";w={spec.key_base2}"
        if spec.secret_h:       # a different secret distribution: another key space
            canon += f";h={spec.secret_h}"
        self.fingerprint = hashlib.sha256(canon.encode()).digest()[:16]

    def __repr__(self) -> str:
        return (f"CKKSParams({self.name!r}, N=2^{self.log_n}, levels={self.max_level}, "
                f"logQP={self.spec.log_qp}, security={self.security_bits or 'none'})")

    # ------------------------------------------------------------ helpers

    def _own(self, obj: HEObject, what: str) -> int:
        if not isinstance(obj, HEObject):
            raise HEArgumentError(f"{what} must be an HE object, got {type(obj).__name__}")
        obj.check_params(self, what)
        return obj.handle

    def q_level(self, level: int) -> int:
        """Product of the moduli q_0..q_level (the ciphertext modulus at ``level``)."""
        out = 1
        for qi in self.q[: level + 1]:
            out *= qi
        return out

    def load(self, data: bytes, expected: type | None = None):
        """Deserialise an HE object, validated against this parameter set."""
        return load(self, data, expected)

    def _poly(self, obj: HEObject, which: int) -> np.ndarray:
        h = self._own(obj, "object")
        out = np.zeros((len(self.q), self.n), dtype=np.uint64)
        lv = C.c_int(0)
        N.call("he_poly", self.handle, h, which, N.ptr(out, N.u64), out.size, C.byref(lv))
        return out[: lv.value].copy()

    # ------------------------------------------------------------ keys

    def keygen(self) -> KeyPair:
        sk, pk = N.u64(0), N.u64(0)
        N.call("he_keygen", self.handle, C.byref(sk), C.byref(pk))
        return KeyPair(SecretKey(self, int(sk.value)), PublicKey(self, int(pk.value)))

    def public_key(self, sk: SecretKey) -> PublicKey:
        return PublicKey(self, N.new_handle("he_pk_from_sk", self.handle, self._own(sk, "sk")))

    def galois_elements(self, rotations=(), conjugate: bool = False, pack: bool = False,
                        expand: bool = False, trace_to: int | None = None) -> list[int]:
        """Galois elements for slot rotations, conjugation, packing, expand, trace."""
        els: set[int] = set()

        def ask(kind: int, ks) -> None:
            ks = np.ascontiguousarray(list(ks), dtype=np.int64)
            out = np.zeros(max(64, len(ks) + 4 * self.log_n), dtype=np.uint64)
            n = C.c_int(0)
            N.call("he_galois_elements", self.handle, kind, N.ptr(ks, N.i64), len(ks),
                   N.ptr(out, N.u64), len(out), C.byref(n))
            els.update(int(v) for v in out[: n.value])

        rots = [int(r) % self.max_slots for r in rotations]
        rots = [r for r in rots if r]
        if rots:
            ask(0, rots)
        if conjugate:
            ask(1, [])
        if pack:
            ask(2, [])
        if expand:
            ask(3, [])
        if trace_to is not None:
            ask(4, [trace_to])
        return sorted(els)

    def gen_eval_keys(self, sk: SecretKey, rotations=(), relin: bool = True,
                      conjugate: bool = False, pack: bool = False, expand: bool = False,
                      trace_to: int | None = None, galois=()) -> EvalKeys:
        """Relinearisation key and Galois keys for the requested operations."""
        els = set(self.galois_elements(rotations, conjugate, pack, expand, trace_to))
        els.update(int(g) for g in galois)
        if (relin or els) and not self.spec.key_switching:
            raise HEArgumentError(
                f"parameter set {self.name!r} cannot key-switch accurately (its special modulus P "
                f"is {self.spec.key_switch_gap_bits} bits below a key-switching digit, more than "
                f"{KEY_SWITCH_MAX_GAP}): it refuses relinearisation and rotation keys; use it "
                f"without key switching (relin=False, no Galois elements) or pick a set with a "
                f"larger P (e.g. ckks-n13-128)")
        arr = np.ascontiguousarray(sorted(els), dtype=np.uint64)
        h = N.new_handle("he_evk_gen", self.handle, self._own(sk, "sk"), int(relin),
                         N.ptr(arr, N.u64), len(arr))
        return EvalKeys(self, h)

    # ------------------------------------------------------------ encode / encrypt

    def encode(self, values, level: int | None = None, log_slots: int | None = None,
               log_scale: float | None = None) -> Plaintext:
        """CKKS-encode a complex (or real) vector into 2^log_slots slots (zero padded)."""
        v = np.asarray(values)
        if v.ndim != 1:
            raise HEArgumentError("encode takes a 1-d vector")
        v = v.astype(np.complex128)
        if log_slots is None:
            log_slots = max(0, int(np.ceil(np.log2(max(len(v), 1)))))
        level = self.max_level if level is None else int(level)
        re = np.ascontiguousarray(v.real)
        im = np.ascontiguousarray(v.imag)
        h = N.new_handle("he_encode", self.handle, N.ptr(re, N.f64), N.ptr(im, N.f64), len(v),
                         int(log_slots), level, float(log_scale or 0.0))
        return Plaintext(self, h)

    def decode(self, pt: Plaintext) -> np.ndarray:
        h = self._own(pt, "plaintext")
        n = pt.slots
        re = np.zeros(n, dtype=np.float64)
        im = np.zeros(n, dtype=np.float64)
        N.call("he_decode", self.handle, h, N.ptr(re, N.f64), N.ptr(im, N.f64), n)
        return re + 1j * im

    def encrypt(self, data, key: PublicKey | SecretKey, **encode_kw) -> Ciphertext:
        """Encrypt a plaintext (or a vector, encoded first) with a public or secret key."""
        if not isinstance(key, (PublicKey, SecretKey)):
            raise HEArgumentError("encryption key must be a PublicKey or SecretKey")
        pt = data if isinstance(data, Plaintext) else self.encode(data, **encode_kw)
        try:
            h = N.new_handle("he_encrypt", self.handle, self._own(key, "key"),
                             self._own(pt, "plaintext"))
        finally:
            if pt is not data:
                pt.close()
        return Ciphertext(self, h)

    def decrypt(self, ct: Ciphertext, sk: SecretKey) -> Plaintext:
        return Plaintext(self, N.new_handle("he_decrypt", self.handle, self._own(sk, "sk"),
                                            self._own(ct, "ciphertext")))

    def decrypt_decode(self, ct: Ciphertext, sk: SecretKey) -> np.ndarray:
        with self.decrypt(ct, sk) as pt:
            return self.decode(pt)

    def __eq__(self, other) -> bool:
        return isinstance(other, CKKSParams) and other.fingerprint == self.fingerprint

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def require_same(self, other: "CKKSParams") -> None:
        if other != self:
            raise ParameterMismatchError(f"parameter sets {self.name!r} and {other.name!r} differ")
