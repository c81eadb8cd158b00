"""certified: computation on certified data [Chatel et al., "Privacy and Integrity Preserving
Computations with CRISP", USENIX Security 2021; fragment in crisp-certified-data-fragment.txt].

Roles (each its own process on the runtime):

* ``data_source`` (input role: it measures the data): signs every message
  msg_i = d_i || nonce_i || uid || timestamp_i (d_i one data point, or for a batched use
  case the batch of a ciphertext's points) over SHA-256(msg_i) with ML-DSA and hands the
  signed messages to the user; its verification key goes to the provider over the
  authenticated channel. It already knows the data, so the provider's final receipt of
  psi(d) (the runtime's output) tells it nothing new.
* ``user``: encodes the data points into CKKS slots (real values, null imaginary part),
  encrypts with randomness she keeps, commits to the noises (BDOP), proves with ZKB++
  that the digests, the ciphertext and the commitment come from her signed messages, and
  proves that the committed noises are short; at release she decrypts psi's result and
  proves the decryption with the blinding B_{nu,eta} and commitments C0, C1.
* ``provider`` (model role: it owns psi): verifies the signatures, both proofs, evaluates
  psi homomorphically and runs the release.

Every failure aborts with the check that failed (``SPEC.checks``).
"""

from __future__ import annotations

import hashlib
import json

import numpy as np

from secinfer.crypto.he.evaluator import Evaluator
from secinfer.crypto.he.objects import Ciphertext, EvalKeys, PublicKey
from secinfer.crypto.he.params import CKKSParams, get_params
from secinfer.crypto.he.errors import HEError
from secinfer.crypto.he.rlwe import encrypt_with_randomness, keygen_seeded, public_key_from_parts
from secinfer.crypto.prg import PRG
from secinfer.crypto.signature import DEFAULT_SCHEME, SCHEMES, SigningKey, VerifyKey
from secinfer.crypto.zk import bdop, keyproof, popk, zkbpp
from secinfer.errors import ConfigError, ProtocolAbort, ProtocolError, SerializationError
from secinfer.net.channel import ArraySpec
from secinfer.protocols.base import Check, PartyJob, PartyResult, ProtocolSpec, by_role
from secinfer.protocols.certified import usecases

DATA_SOURCE, USER, PROVIDER = "data_source", "user", "provider"
NONCE_BYTES, UID_BYTES, TS_BYTES = 16, 2, 4   # [CRISP-certified Sec. 6.2]
META_BYTES = NONCE_BYTES + UID_BYTES + TS_BYTES
MAX_BATCH = 1 << 16
KEY_PROOF_BITS = 128                          # soundness of the public-key proof
A_SEED_BYTES = 16
NU_MAX = 16.0                                 # |nu^_j| bound (weight 14: exceeded w.p. ~1e-5)
_MAX_BYTES = 1 << 31


def _bytes(a: bytes) -> np.ndarray:
    return np.frombuffer(bytes(a), dtype=np.uint8)


def _spec_bytes(n: int | None = None) -> ArraySpec:
    return ArraySpec(np.uint8, (n,), max_elems=_MAX_BYTES)


class Session:
    """What every role derives from the public options: parameters and circuit shapes."""

    def __init__(self, job: PartyJob, desc: dict | None = None) -> None:
        o = job.options
        self.desc = desc
        self.usecase = usecases.get(desc["usecase"] if desc else o.get("usecase", "sum"))
        name = o.get("he_params") or self.usecase.params
        self.params: CKKSParams = get_params(name)
        if self.params.insecure and not o.get("allow_insecure"):
            raise ConfigError(f"HE parameter set {name!r} is insecure: tests only "
                              "(option allow_insecure)")
        self.reps = int(o.get("reps", zkbpp.PRODUCTION_REPS))
        if self.reps < zkbpp.PRODUCTION_REPS and not o.get("allow_insecure"):
            raise ConfigError(f"{self.reps} ZKB++ repetitions give "
                              f"{zkbpp.soundness_bits(self.reps):.0f}-bit soundness: tests only")
        self.scheme = o.get("signature", DEFAULT_SCHEME)
        if self.scheme not in SCHEMES:
            raise ConfigError(f"unknown signature scheme {self.scheme!r}")
        self.level = self.usecase.levels              # psi's levels (the blinding needs none)
        if self.level > self.params.max_level:
            raise ConfigError(f"{name!r} has {self.params.max_level} levels; "
                              f"{self.usecase.name!r} needs {self.level}")
        self.slots = self.params.n // 2
        self.batch = batch_size(self.usecase, self.slots)
        self.primes = tuple(self.params.q[: self.level + 1])
        self.bp = bdop.BDOPParams(self.params.log_n, self.primes)

    def zk_config(self, n_points: int) -> zkbpp.ZKConfig:
        """The circuit for one ciphertext of ``n_points`` data points."""
        n_msgs, pts = layout(self.batch, n_points)
        return zkbpp.ZKConfig(self.params.log_n, self.primes, self.reps,
                              message_bytes(self.usecase, pts), self.usecase.data_bits, n_msgs,
                              self.usecase.log_scale, pts)

    def chunks(self, n: int) -> list[tuple[int, int]]:
        return [(s, min(n, s + self.slots)) for s in range(0, n, self.slots)]


def batch_size(u: usecases.UseCase, slots: int) -> int:
    """Data points per signed message: one, or a ciphertext's worth for a batched use case."""
    return slots if u.batch else 1


def layout(batch: int, n_points: int) -> tuple[int, int]:
    """(messages, points per message) of one ciphertext's ``n_points`` points; the chunks
    are cut at multiples of the slots, so a batch never straddles two ciphertexts."""
    return (1, n_points) if batch > 1 else (n_points, 1)


def message_bytes(u: usecases.UseCase, points: int) -> int:
    return points * (u.data_bits // 8) + META_BYTES


def make_message(u: usecases.UseCase, d, nonce: bytes, uid: int, ts: int) -> bytes:
    """msg = d (its points, big-endian two's complement each) || nonce || uid || timestamp."""
    nb = u.data_bits // 8
    pts = b"".join(int(v).to_bytes(nb, "big", signed=True) for v in np.atleast_1d(d))
    return pts + nonce + int(uid).to_bytes(UID_BYTES, "big") + int(ts).to_bytes(TS_BYTES, "big")


def data_of(u: usecases.UseCase, msg: bytes) -> np.ndarray:
    """The data points inside a message."""
    nb = u.data_bits // 8
    k = (len(msg) - META_BYTES) // nb
    return np.array([int.from_bytes(msg[i * nb:(i + 1) * nb], "big", signed=True) for i in range(k)],
                    dtype=np.int64)


# ---------------------------------------------------------------- data source


def _run_data_source(ep, job: PartyJob) -> PartyResult:
    o = job.options
    scheme = o.get("signature", DEFAULT_SCHEME)
    sk = SigningKey(job.prg.derive("signing-key").bytes(32), scheme)
    uid, t0 = int(o.get("user_id", 1)), int(o.get("t0", 1_700_000_000))
    with ep.phase("setup"):
        # the kind of data (its fixed-point format) and the points per signed message are
        # public: the provider names them
        (name, batch) = ep.recv(PROVIDER, "certified/kind", _spec_bytes(), ArraySpec(np.int64, (1,)))
        u = usecases.get(name.tobytes().decode("ascii", "replace"))
        batch = int(batch[0])
        if not 1 <= batch <= MAX_BATCH:
            raise ProtocolError(f"data source: {batch} points per message is out of range")
        d = u.quantize(job.input)
        ep.send(PROVIDER, "certified/vk", _bytes(sk.verify_key.raw))
        ep.send(PROVIDER, "certified/count", np.array([d.size], np.int64))
    with ep.phase("offline"):
        nonces = job.prg.derive("nonces")
        # one message per point (timestamped half-hourly) or per batch of points
        msgs = [make_message(u, d[a:a + batch], nonces.bytes(NONCE_BYTES), uid, t0 + 1800 * a)
                for a in range(0, d.size, batch)]
        sigs = [sk.sign(hashlib.sha256(m).digest()) for m in msgs]   # [CRISP-certified Sec. 5.2]
        ep.send(USER, "certified/signed", _bytes(b"".join(msgs)), _bytes(b"".join(sigs)))
    with ep.phase("online"):
        (res,) = ep.recv(PROVIDER, "certified/receipt", ArraySpec(np.float64, (1,)), timeout=3600)
    return PartyResult(output=res.copy(), info={"points": int(d.size), "signature": scheme})


# ---------------------------------------------------------------- user


def _run_user(ep, job: PartyJob) -> PartyResult:
    with ep.phase("setup"):
        (raw,) = ep.recv(PROVIDER, "certified/psi", _spec_bytes())
        (ctx_nonce, key_seed, a_seed) = ep.recv(PROVIDER, "certified/session", _spec_bytes(16),
                                                _spec_bytes(16), _spec_bytes(A_SEED_BYTES))
    desc = json.loads(raw.tobytes())
    s = Session(job, desc)
    desc = usecases.parse(desc, 1 << 24)
    u, params = s.usecase, s.params
    ctx = bytes(ctx_nonce) + bytes(ep.session_id)
    with ep.phase("offline"):
        n = desc["n_points"]
        msgs_raw, sigs_raw = ep.recv(DATA_SOURCE, "certified/signed", _spec_bytes(), _spec_bytes())
        cfgs = [s.zk_config(b - a) for (a, b) in s.chunks(n)]
        sizes = [c.msg_bytes for c in cfgs for _ in range(c.n_msgs)]
        if msgs_raw.size != sum(sizes):
            raise ProtocolError(f"user: expected {len(sizes)} messages of {sum(sizes)} bytes in all "
                                "from the data source")
        ends = np.cumsum([0] + sizes)
        msgs = [msgs_raw[ends[i]:ends[i + 1]].tobytes() for i in range(len(sizes))]
        sig_size = sigs_raw.size // len(sizes)
        sigs = [sigs_raw[i * sig_size:(i + 1) * sig_size].tobytes() for i in range(len(sizes))]
        prg = job.prg.derive("user")
        # the key pair for the provider's a, from the injected PRG; pk0 proven well formed
        kp, sk_s, sk_e = keygen_seeded(params, bytes(a_seed), prg.bytes(32))
        evk = params.gen_eval_keys(kp.sk, rotations=usecases.rotation_steps(s.slots, u.name),
                                   relin=u.release != "coeff")
        key = bdop.commitment_key(s.bp, bytes(key_seed))
        ep.send(PROVIDER, "certified/keys", kp.pk.poly(0), _bytes(evk.to_bytes()))
        _prove_key(ep, params, kp, sk_s, sk_e, prg.derive("keyproof"))
    with ep.phase("online"):
        cts = []
        m0 = 0
        for cfg in cfgs:
            a, b = m0, m0 + cfg.n_msgs             # this ciphertext's messages
            m0 = b
            d = np.concatenate([data_of(u, m) for m in msgs[a:b]])
            pt = zkbpp.plaintext(params, zkbpp.encode(cfg, d), s.level, u.log_scale)
            ct, rnd = encrypt_with_randomness(params, pt, kp.pk, seed=prg.bytes(32))
            pt.close()
            noises = np.stack([rnd.u, rnd.e0, rnd.e1])
            r = bdop.sample_randomness(s.bp, prg)
            com = bdop.commit(s.bp, key, noises, r)
            st = statement(s, cfg, kp.pk, ct, com, key, [hashlib.sha256(m).digest() for m in msgs[a:b]])
            wit = zkbpp.Witness(msgs[a:b], np.vstack([noises, r]).astype(np.int64))
            proof = zkbpp.prove(cfg, st, wit, prg.bytes(32), ctx)
            bound = bdop.prove_bound(s.bp, key, com, noises, r, prg, ctx)
            ep.send(PROVIDER, "certified/upload", _bytes(b"".join(st.digests)),
                    _bytes(b"".join(sigs[a:b])), _bytes(ct.to_bytes()), com, _bytes(proof),
                    _bytes(bound))
            cts.append(ct)
        info = _user_release(ep, s, desc, params, kp, evk, cts, prg)
    return PartyResult(info=info)


def statement(s: Session, cfg: zkbpp.ZKConfig, pk: PublicKey, ct: Ciphertext, com: np.ndarray,
              key: np.ndarray, digests: list[bytes]) -> zkbpp.Statement:
    """The ZKB++ statement: public polynomials (pk0, pk1, BDOP key), outputs (ct, com)."""
    L = len(s.primes)
    pk_rows = [s.params._poly(pk, i)[:L] for i in (0, 1)]
    ct_rows = [s.params._poly(ct, i) for i in (0, 1)]
    if any(r.shape != (L, s.params.n) for r in ct_rows):
        raise ProtocolAbort("zkbpp-encryption", USER, "ciphertext at the wrong level")
    public = np.concatenate([np.stack(pk_rows), key])
    output = np.concatenate([np.stack(ct_rows), com])
    return zkbpp.Statement(list(digests), public, output)


def _commit(tag: bytes, rho: bytes, *arrays: np.ndarray) -> bytes:
    """SHA-256 commitment [CRISP-certified Sec. 6.1, "Release Protocol"]."""
    h = hashlib.sha256(b"secinfer/certified/" + tag + b"\0" + rho)
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(str((a.dtype.str, a.shape)).encode() + a.tobytes())
    return h.digest()


def _user_release(ep, s: Session, desc, params, kp, evk, cts, prg) -> dict:
    """[CRISP-certified Sec. 4.5/5.1] decrypt psi's result and prove it with C1."""
    (ctb_raw, c0) = ep.recv(PROVIDER, "certified/release", _spec_bytes(), _spec_bytes(32))
    ct_b = params.load(ctb_raw.tobytes(), Ciphertext)
    ev = Evaluator(params, evk)
    ct_psi = usecases.evaluate(ev, desc, cts, s.slots)         # psi is public: recompute it
    if s.usecase.release == "coeff":
        return _user_release_coeff(ep, s, params, kp, ev, ct_psi, ct_b, c0, prg)
    m = _complex_rows(params.decrypt_decode(ct_psi, kp.sk))
    m_b = _complex_rows(params.decrypt_decode(ct_b, kp.sk))
    rho1 = prg.bytes(16)
    ep.send(PROVIDER, "certified/c1", _bytes(_commit(b"C1", rho1, m, m_b)))
    rho0, nu, eta = ep.recv(PROVIDER, "certified/open-c0", _spec_bytes(16),
                            ArraySpec(np.int64, (s.params.n,)), ArraySpec(np.float64, (2, s.slots)))
    # the provider blinded exactly psi's result: the user is no decryption oracle
    ok = _commit(b"C0", rho0.tobytes(), nu, eta) == c0.tobytes()
    ok = ok and bool(np.all(np.abs(nu) <= 1)) and int(np.count_nonzero(nu)) == s.usecase.nu_weight
    if ok:
        with blind(ev, params, ct_psi, nu, eta) as want:
            ok = all(np.array_equal(params._poly(want, i), params._poly(ct_b, i)) for i in (0, 1))
    ep.require(ok, "release-blinding", PROVIDER, "the blinded ciphertext is not B(psi(ct))")
    ep.send(PROVIDER, "certified/open-c1", _bytes(rho1), m, m_b)
    (res,) = ep.recv(PROVIDER, "certified/accepted", ArraySpec(np.float64, (1,)))
    return {"result": float(res[0])}


def constant_coeff(params: CKKSParams, ct: Ciphertext, sk) -> int:
    """The constant coefficient (mod q_0) of ct's decryption: exact, no decoding."""
    with params.decrypt(ct, sk) as pt:
        return int(pt.poly(0)[0, 0])


def _user_release_coeff(ep, s: Session, params, kp, ev, ct_psi, ct_b, c0, prg) -> dict:
    """The release on the constant coefficient [CRISP-certified Sec. 6.1: "a linear
    blinding operation B_{nu,eta} in Z_q"; Sec. 5.2: "a one-time-pad shift cipher in Z_q"]:
    the user reveals only coefficient 0 of Dec(psi) and of Dec(B(psi))."""
    q = int(params.q[0])
    m = np.array([constant_coeff(params, ct_psi, kp.sk), constant_coeff(params, ct_b, kp.sk)],
                 dtype=np.uint64)
    rho1 = prg.bytes(16)
    ep.send(PROVIDER, "certified/c1", _bytes(_commit(b"C1", rho1, m)))
    rho0, nu, eta = ep.recv(PROVIDER, "certified/open-c0", _spec_bytes(16), ArraySpec(np.uint64, (1,)),
                            ArraySpec(np.uint64, (1, params.n)))
    ok = _commit(b"C0", rho0.tobytes(), nu, eta) == c0.tobytes()
    ok = ok and 0 < int(nu[0]) < q and bool(np.all(eta < np.uint64(q)))
    if ok:
        with blind_zq(ev, params, ct_psi, int(nu[0]), eta) as want:
            ok = all(np.array_equal(params._poly(want, i), params._poly(ct_b, i)) for i in (0, 1))
    ep.require(ok, "release-blinding", PROVIDER, "the blinded ciphertext is not B(psi(ct))")
    ep.send(PROVIDER, "certified/open-c1", _bytes(rho1), m)
    (res,) = ep.recv(PROVIDER, "certified/accepted", ArraySpec(np.float64, (1,)))
    return {"result": float(res[0])}


def blind_zq(ev: Evaluator, params: CKKSParams, ct: Ciphertext, nu: int, eta: np.ndarray) -> Ciphertext:
    """B_{nu,eta}(ct) = nu ct + eta over R_q exactly: nu a scalar in Z_q^*, eta a uniform
    polynomial (every coefficient of Dec(B(ct)) is one-time padded)."""
    res = np.zeros((ct.level + 1, params.n), dtype=np.uint64)
    res[:, 0] = nu
    with zkbpp.plaintext(params, res, ct.level, 0) as pn, ev.mul(ct, pn) as prod:
        with zkbpp.plaintext(params, np.asarray(eta, dtype=np.uint64), ct.level,
                             int(round(prod.log_scale))) as pe:
            return ev.add(prod, pe)


def _complex_rows(z: np.ndarray) -> np.ndarray:
    """Complex slots as a (2, slots) float64 array (real, imaginary)."""
    return np.ascontiguousarray(np.stack([z.real, z.imag]), dtype=np.float64)


def _nu_plaintext(params: CKKSParams, nu: np.ndarray, level: int):
    """The blinding polynomial nu(X) (small integer coefficients) as a plaintext at scale 1:
    multiplying by it is exact ring multiplication, keeps the scale and needs no level."""
    res = np.stack([np.asarray(nu, dtype=np.int64) % q for q in params.q[: level + 1]])
    return zkbpp.plaintext(params, res.astype(np.uint64), level, 0)


def blind(ev: Evaluator, params: CKKSParams, ct: Ciphertext, nu: np.ndarray, eta: np.ndarray) -> Ciphertext:
    """B_{nu,eta}(ct) = nu(X) * ct + eta [CRISP-certified Sec. 6.1, "a linear blinding
    operation in Z_q"]: nu a sparse ternary polynomial (slot j is multiplied by nu(zeta_j),
    a complex number the provider knows), eta complex per slot."""
    with _nu_plaintext(params, nu, ct.level) as pn, ev.mul(ct, pn) as prod:
        e = np.asarray(eta[0], dtype=np.float64) + 1j * np.asarray(eta[1], dtype=np.float64)
        with params.encode(e, level=prod.level, log_slots=prod.log_slots,
                           log_scale=prod.log_scale) as pt:
            return ev.add(prod, pt)


def nu_slots(params: CKKSParams, nu: np.ndarray, level: int) -> np.ndarray:
    """nu(zeta_j) for every slot j (the canonical embedding of nu)."""
    with _nu_plaintext(params, nu, level) as pn:
        return params.decode(pn)


# ---------------------------------------------------------------- provider


def _run_provider(ep, job: PartyJob) -> PartyResult:
    o = job.options
    if job.model is not None:
        from secinfer.protocols.certified.graphs import usecase_of

        name, weights, coeffs = usecase_of(job.model)
    else:
        name, weights, coeffs = o.get("usecase", "sum"), o.get("weights"), None
    with ep.phase("setup"):
        s = Session(job, {"usecase": usecases.get(name).name})
        ep.send(DATA_SOURCE, "certified/kind", _bytes(s.usecase.name.encode()),
                np.array([s.batch], np.int64))
        (vk_raw,) = ep.recv(DATA_SOURCE, "certified/vk", _spec_bytes())
        (count,) = ep.recv(DATA_SOURCE, "certified/count", ArraySpec(np.int64, (1,)))
        n = int(count[0])
        desc = usecases.describe(name, n, weights, o.get("step_bound"), coeffs)
        s.desc = desc
        vk = VerifyKey(s.scheme, vk_raw.tobytes())
        prg = job.prg.derive("provider")
        ctx_nonce, key_seed, a_seed = prg.bytes(16), prg.bytes(16), prg.bytes(A_SEED_BYTES)
        ep.send(USER, "certified/psi", _bytes(usecases.to_bytes(desc)))
        ep.send(USER, "certified/session", _bytes(ctx_nonce), _bytes(key_seed), _bytes(a_seed))
    params = s.params
    ctx = ctx_nonce + bytes(ep.session_id)
    key = bdop.commitment_key(s.bp, key_seed)
    with ep.phase("offline"):
        pk0, evk_raw = ep.recv(USER, "certified/keys", ArraySpec(np.uint64, (len(params.q), params.n)),
                               _spec_bytes())
        try:     # every residue below its prime, else a malformed message
            pk = public_key_from_parts(params, a_seed, pk0)
        except HEError as e:
            raise SerializationError(f"certified: the user's pk0 is malformed: {e}") from None
        _verify_key(ep, params, pk, prg)
        evk = params.load(evk_raw.tobytes(), EvalKeys)
    with ep.phase("online"):
        cts = []
        for (a, b) in s.chunks(n):
            cts.append(_verify_chunk(ep, s, vk, pk, key, ctx, b - a))
        ev = Evaluator(params, evk)
        ct_psi = usecases.evaluate(ev, desc, cts, s.slots)    # [CRISP-certified Sec. 4.4]
        m = _provider_release(ep, s, params, ev, ct_psi, prg)
        result = m / usecases.result_scale(desc)
        ep.send(USER, "certified/accepted", np.array([result], np.float64))
        ep.send(DATA_SOURCE, "certified/receipt", np.array([result], np.float64))
    return PartyResult(info={"result": result, "usecase": desc["usecase"], "points": n,
                             "reps": s.reps, "soundness_bits": zkbpp.soundness_bits(s.reps)})


def _prove_key(ep, params, kp, s, e, prg: PRG) -> None:
    """The user's proof of knowledge of short (s, e) with pk0 + a s = e for the provider's
    a (``secinfer.crypto.zk.keyproof``, 128-bit soundness): restarts on rejection."""
    prover = keyproof.KeyProver(params, kp.pk, s, e, prg, KEY_PROOF_BITS)
    for att in range(popk.MAX_ATTEMPTS):
        ep.send(PROVIDER, f"certified/pk/h{att}", _bytes(prover.commit()))
        (seed,) = ep.recv(PROVIDER, f"certified/pk/ch{att}", _spec_bytes(popk.SEED_BYTES))
        z = prover.respond(seed.tobytes())
        ep.send(PROVIDER, f"certified/pk/z{att}", _bytes(z if z is not None else b"\0"))
        if z is not None:
            return
    raise ProtocolError(f"certified: no key-proof attempt accepted in {popk.MAX_ATTEMPTS}")


def _verify_key(ep, params, pk, prg: PRG) -> None:
    """[CRISP-certified Lemma A.1 needs a well-formed key] check the user's key proof; the
    challenge seed is drawn after pk0 and the commitment are fixed."""
    ver = keyproof.KeyVerifier(params, pk, KEY_PROOF_BITS)
    for att in range(popk.MAX_ATTEMPTS):
        (h,) = ep.recv(USER, f"certified/pk/h{att}", _spec_bytes(popk.HASH_BYTES))
        ch = prg.bytes(popk.SEED_BYTES)        # drawn only now: pk0 and h are fixed
        ep.send(USER, f"certified/pk/ch{att}", _bytes(ch))
        (z,) = ep.recv(USER, f"certified/pk/z{att}", ArraySpec(np.uint8, (None,), max_elems=ver.g.payload_bytes))
        if z.size == 1 and z[0] == 0:
            continue
        ok, why = ver.check(h.tobytes(), ch, z.tobytes())
        ep.require(ok, "public-key", USER, f"the public key proof: {why}")
        return
    ep.require(False, "public-key", USER, f"no accepted key proof in {popk.MAX_ATTEMPTS} attempts")


def _verify_chunk(ep, s: Session, vk: VerifyKey, pk, key, ctx: bytes, n: int) -> Ciphertext:
    """[CRISP-certified Sec. 4.3] signatures, ZKB++ proof, bound proof; any failure aborts.
    ``n``: the ciphertext's data points."""
    L = len(s.primes)
    cfg = s.zk_config(n)
    k = cfg.n_msgs
    dig, sigs, ct_raw, com, proof, bound = ep.recv(
        USER, "certified/upload", _spec_bytes(32 * k), _spec_bytes(), _spec_bytes(),
        ArraySpec(np.uint64, (4, L, s.params.n)), _spec_bytes(), _spec_bytes())
    digests = [dig[32 * i:32 * i + 32].tobytes() for i in range(k)]
    sl = vk.signature_bytes
    ok = sigs.size == k * sl and all(
        vk.verify(digests[i], sigs[i * sl:(i + 1) * sl].tobytes()) for i in range(k))
    ep.require(ok, "signature", USER, "a digest is not signed by the data source")
    ct = s.params.load(ct_raw.tobytes(), Ciphertext)
    ok = ct.level == s.level and ct.degree == 1 and abs(ct.log_scale - s.usecase.log_scale) < 1e-9
    ep.require(ok, "zkbpp-encryption", USER, "ciphertext level, degree or scale")
    st = statement(s, cfg, pk, ct, com, key, digests)
    v = zkbpp.verify(cfg, st, proof, ctx)
    ep.require(v.view_ok, "zkbpp-view", USER, "an opened ZKB++ view is inconsistent")
    ep.require(v.challenge_ok, "zkbpp-challenge", USER, "the Fiat-Shamir challenge is not this session's")
    ep.require(v.digest_ok, "zkbpp-digest", USER, "the hashed messages are not the signed ones")
    ep.require(v.encryption_ok, "zkbpp-encryption", USER,
               "the ciphertext or commitment does not come from the signed data")
    try:
        bv = bdop.verify_bound(s.bp, key, com, bound.tobytes(), ctx)
    except SerializationError:   # a malformed bound proof is a failed one
        bv = bdop.BoundVerdict(False, False)
    ep.require(bv.ok, "noise-bound", USER, "the committed encryption noises are not short")
    return ct


def _provider_release_coeff(ep, s: Session, params, ev, ct_psi, prg: PRG) -> float:
    """[CRISP-certified Sec. 4.5, 6.1] B_{nu,eta} in Z_q on psi's constant coefficient:
    nu uniform in Z_q^*, eta uniform in R_q; the opened coefficients must satisfy
    m_B = nu m + eta_0 (mod q) exactly."""
    q = int(params.q[0])
    nu = 1 + int(prg.below(q - 1, 1)[0])
    eta = prg.below(q, params.n).astype(np.uint64).reshape(1, params.n)
    rho0 = prg.bytes(16)
    nu_arr = np.array([nu], dtype=np.uint64)
    with blind_zq(ev, params, ct_psi, nu, eta) as ct_b:
        ep.send(USER, "certified/release", _bytes(ct_b.to_bytes()), _bytes(_commit(b"C0", rho0, nu_arr, eta)))
    (c1,) = ep.recv(USER, "certified/c1", _spec_bytes(32))
    ep.send(USER, "certified/open-c0", _bytes(rho0), nu_arr, eta)
    rho1, m = ep.recv(USER, "certified/open-c1", _spec_bytes(16), ArraySpec(np.uint64, (2,)))
    ok = _commit(b"C1", rho1.tobytes(), m) == c1.tobytes()
    ok = ok and int(m[0]) < q and int(m[1]) == (nu * int(m[0]) + int(eta[0, 0])) % q
    ep.require(ok, "release-decryption", USER, "the decrypted coefficient does not match the blinded one")
    return usecases.coeff_value(int(m[0]), q, params.n, ct_psi.log_scale)


def _provider_release(ep, s: Session, params, ev, ct_psi, prg: PRG) -> float:
    """[CRISP-certified Sec. 4.5] blind with (nu, eta), commit C0, receive C1, open C0,
    receive the opening of C1, check m_B = nu^ m + eta slot-wise and that m is replicated."""
    if s.usecase.release == "coeff":
        return _provider_release_coeff(ep, s, params, ev, ct_psi, prg)
    slots, n = s.slots, params.n
    u = s.usecase
    while True:   # a sparse ternary nu with every |nu(zeta_j)| <= NU_MAX (the headroom)
        nu = np.zeros(n, dtype=np.int64)
        pos = prg.below(n, 4 * u.nu_weight)
        pos = pos[np.sort(np.unique(pos, return_index=True)[1])][: u.nu_weight]
        if pos.size < u.nu_weight:
            continue
        nu[pos] = 2 * prg.below(2, u.nu_weight).astype(np.int64) - 1
        nu_hat = nu_slots(params, nu, ct_psi.level)
        if np.max(np.abs(nu_hat)) <= NU_MAX:
            break
    eta = (prg.below(1 << (u.eta_bits + 1), 2 * slots) - (1 << u.eta_bits)).astype(np.float64)
    eta = (eta + prg.below(1 << 20, 2 * slots) / float(1 << 20)).reshape(2, slots)
    rho0 = prg.bytes(16)
    with blind(ev, params, ct_psi, nu, eta) as ct_b:
        ep.send(USER, "certified/release", _bytes(ct_b.to_bytes()), _bytes(_commit(b"C0", rho0, nu, eta)))
    (c1,) = ep.recv(USER, "certified/c1", _spec_bytes(32))
    ep.send(USER, "certified/open-c0", _bytes(rho0), nu, eta)
    rho1, m, m_b = ep.recv(USER, "certified/open-c1", _spec_bytes(16),
                           ArraySpec(np.float64, (2, slots)), ArraySpec(np.float64, (2, slots)))
    ok = _commit(b"C1", rho1.tobytes(), m, m_b) == c1.tobytes()
    ok = ok and bool(np.all(np.isfinite(m)) and np.all(np.isfinite(m_b)))
    if ok:
        mz, mbz = m[0] + 1j * m[1], m_b[0] + 1j * m_b[1]
        want = nu_hat * mz + (eta[0] + 1j * eta[1])
        tol = u.release_tol
        ok = bool(np.all(np.abs(mbz - want) <= tol + 1e-9 * np.abs(want)))
        ok = ok and bool(np.all(np.abs(mz - mz[0].real) <= tol))  # psi is replicated, real
    ep.require(ok, "release-decryption", USER, "the decrypted result does not match the blinded one")
    return float(m[0][0])


# ---------------------------------------------------------------- spec


run_party = by_role("certified", {DATA_SOURCE: _run_data_source, USER: _run_user, PROVIDER: _run_provider})


def check_model(graph, security: str) -> None:
    from secinfer.protocols.certified.graphs import usecase_of

    if security != "malicious":
        raise ProtocolError(f"certified runs against a malicious user ('malicious'), not {security!r}")
    if graph is not None:
        usecase_of(graph)


def value_limits(graph, cfg, options: dict) -> dict | None:
    """Pre-launch ranges (secinfer.ir.validate): every data point must fit the use case's
    signed ``data_bits``-bit fixed point (the data source signs that; 16-bit readings in Wh
    stop at 32.767 kWh), and the sum must fit the release's headroom on the single-prime
    ring (``UseCase.max_result``)."""
    if graph is None:
        return None
    from secinfer.protocols.certified.graphs import usecase_of

    name, _, _ = usecase_of(graph)
    u = usecases.get(name)
    lim = {"input": ((1 << (u.data_bits - 1)) - 0.5) / u.unit}
    if name == "sum":
        lim["values"] = u.max_result / u.unit
    return lim


CHECKS = (
    Check("public-key", "the user's public key is pk0 = e - a s with short (s, e) for the provider's a "
          "(proof of knowledge, 128-bit)", "CRISP-certified Lemma A.1; secinfer.crypto.zk.keyproof"),
    Check("signature", "every digest carries the data source's ML-DSA signature", "CRISP-certified Sec. 4.3"),
    Check("zkbpp-view", "the opened ZKB++ views match their commitments and output shares", "ZKB++ Sec. 3"),
    Check("zkbpp-challenge", "the Fiat-Shamir challenge hashes this session's context and transcript",
          "ZKB++ Sec. 3"),
    Check("zkbpp-digest", "the circuit's SHA-256 outputs are the signed digests", "CRISP-certified Sec. 6.1"),
    Check("zkbpp-encryption", "the circuit's arithmetic outputs are the ciphertext and BDOP commitment",
          "CRISP-certified Sec. 6.1"),
    Check("noise-bound", "the BDOP bound proof: the committed encryption noises are short",
          "CRISP-certified Sec. 5.2 (property A.3)"),
    Check("release-blinding", "(user) the ciphertext to decrypt is B_{nu,eta}(psi(ct))",
          "CRISP-certified Sec. 5.1"),
    Check("release-decryption", "C1 opens to (m, m_B) with m_B = nu(zeta) m + eta slot-wise, m replicated",
          "CRISP-certified Sec. 5.1"),
)

SPEC = ProtocolSpec(
    name="certified",
    description="computation on certified data: ML-DSA-signed messages, CKKS encryption proven "
                "correct with ZKB++ and a BDOP bound proof, homomorphic psi, verifiable release",
    roles=(DATA_SOURCE, USER, PROVIDER),
    model_role=PROVIDER,
    input_role=DATA_SOURCE,
    securities=("malicious",),
    default_security="malicious",
    run_party=run_party,
    check_model=check_model,
    value_limits=value_limits,
    paper="crisp-certified-data-fragment.txt",
    checks=CHECKS,
)
