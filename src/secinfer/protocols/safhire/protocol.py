"""``safhire``: hybrid inference, linear layers on RLWE/LWE at the server, non-linear layers
in the clear at the client, shuffling for model confidentiality [SAFHIRE, Biswas et al.].

Roles: ``server`` (the model; semi-honest towards the client's data), ``client`` (the
input and the only secret key; may send arbitrary inputs to learn the model, which the
shuffling is there to stop [SAFHIRE Sec. 3, 5]). Security: ``semi-honest``.

Message flow (every message carries the session id and header [t, sample, round, kind]):

  setup   client -> server  sh/hello   kind HELLO (t = 0, input size) or RESUME (t = its round)
          server -> client  sh/meta    public metadata, once [SAFHIRE Sec. 4.2]: input shape, b, per
                                       round sizes, window size k, eta, clip range, ReLU;
                                       ring, Delta; where to resume
          client -> server  sh/keys    the packing (automorphism) keys of its secret key
  online  per sample and round r (t = sample R + r + 1):
          client -> server  sh/x       RLWE_s(Delta v_r), one ciphertext per N values [SAFHIRE 4.3]
          server -> client  sh/y       extract, unshuffle (sigma_{r-1}), W v + bias, window
                                       layout, shuffle (sigma_r; not in the last round), pack [SAFHIRE 4.4]
          client: decrypt, wrap to b bits, ReLU, window max, clip(floor(y / eta)) [SAFHIRE 4.5]
          client -> server  sh/bye

Options: b (8 | 12 | 16, default 12), gamma (0; 1 and 2 need the HE core's partial trace
extraction), he_params (default ckks-n13-128; ``insecure`` sets only with
allow_insecure_he), calib (npz with X: calibration data; default: the bundled split for a
bundled model, random inputs otherwise), sessions (server: session store directory, enables
resumption), checkpoint (client: its checkpoint file), shuffle (default on; "off" is the
INSECURE analysis mode of Sec. 5 (i), announced on stderr), trace (client: keep every
round's decrypted values in the result, for tests), threads (server: the product's and
packing's thread count), tile_mb (server: the memory budget of one tile of a round's
LWE ciphertexts, default 256; "none": whole rounds), out_mb (server: a round's output LWE
ciphertexts above this many MB, default 2048, are held in an unlinked file in a private
temporary directory instead of memory; "none": always in memory), spill_dir (server: where
that directory is made; default the system's temporary directory), log_rounds (server: print each round's seconds by operation to stderr as it ends),
qcache (server: a directory it trusts where quantized models are
kept, keyed by a hash of model, b and calibration; .npz files read without pickle, but a
file someone else wrote there would be taken as the model, so keep it the server's own).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from secinfer.crypto.prg import PRG
from secinfer.errors import ConfigError, ProtocolError, ShapeError
from secinfer.net.channel import ArraySpec
from secinfer.protocols.base import PartyJob, PartyResult, ProtocolSpec, by_role
from secinfer.protocols.safhire import dp
from secinfer.protocols.safhire.server_round import OpClock, ServerRound
from secinfer.protocols.twopc.session import CLIENT, SERVER, timed   # [issue #20: the two-party template]
from secinfer.protocols.safhire.session import (
    BYE, HELLO, KEYS, META, RESUME, SID_BYTES, X, Y, ServerSession, SessionStore,
    SkippedRoundError, StaleRoundError, check_message, header, load_checkpoint,
    save_checkpoint, sid_array,
)

DEFAULT_B = 12
GAMMAS = (0, 1, 2)
HDR = ArraySpec(np.int64, (4,))
SID = ArraySpec(np.uint8, (SID_BYTES,))
_MAX_META = 1 << 22
_CT = ArraySpec(np.uint8, (None,), max_elems=1 << 26)
_EVK = ArraySpec(np.uint8, (None,), max_elems=1 << 31)
_CALIB_SEED = b"safhire-calibrat"
SETUP_WAIT_S = 3600.0       # the client's wait for the server's set-up answer (quantization)
ROUND_WAIT_S = 3600.0       # either party's wait for the other's round message
MAX_NOISE_UNITS = 0.25      # a decryption closer than this to a rounding boundary is refused
DEFAULT_TILE_MB = 256       # the server's budget for one tile's LWE ciphertexts (in and out)
DEFAULT_OUT_MB = 2048       # a round's output LWE ciphertexts above this go to an unlinked file (outbuf)
NOISE_MARGIN_BITS = 5       # the server wants the measured packing noise below Delta / 32   # public: calibration draws must be the same on resumption


# ---------------------------------------------------------------- configuration
def _config(job: PartyJob) -> dict:
    o = job.options
    try:
        b = int(o.get("b", DEFAULT_B))
        gamma = int(o.get("gamma", 0))
    except (TypeError, ValueError):
        raise ConfigError("safhire options b and gamma must be integers") from None
    if b not in (8, 12, 16):
        raise ConfigError(f"safhire: b must be 8, 12 or 16, not {b}")
    if gamma not in GAMMAS:
        raise ConfigError(f"safhire: gamma must be 0, 1 or 2, not {gamma}")
    from secinfer.protocols.safhire.lwe import backend, default_params

    backend(gamma)          # gamma > 0 needs the HE core's partial trace extraction
    try:
        threads = int(o.get("threads", 1))
    except (TypeError, ValueError):
        raise ConfigError("safhire option threads must be an integer") from None
    if not 1 <= threads <= 64:
        raise ConfigError(f"safhire: threads must lie in [1, 64], not {threads}")
    tile = str(o.get("tile_mb", DEFAULT_TILE_MB)).lower()
    try:
        tile_mb = None if tile in ("0", "none", "off") else float(tile)
    except ValueError:
        raise ConfigError(f"safhire option tile_mb must be a number of MB or 'none', not {tile!r}") from None
    if tile_mb is not None and not tile_mb > 0:
        raise ConfigError(f"safhire: tile_mb must be positive (or 'none'), not {tile_mb}")
    out = str(o.get("out_mb", DEFAULT_OUT_MB)).lower()
    try:
        out_mb = None if out in ("none", "off") else float(out)
    except ValueError:
        raise ConfigError(f"safhire option out_mb must be a number of MB or 'none', not {out!r}") from None
    if out_mb is not None and not out_mb >= 0:
        raise ConfigError(f"safhire: out_mb must be >= 0 (or 'none'), not {out_mb}")
    spill = o.get("spill_dir")
    if spill is not None and not os.path.isdir(str(spill)):
        raise ConfigError(f"safhire: spill_dir {spill!r} is not a directory")
    shuffle = str(o.get("shuffle", "on")).lower()
    if shuffle not in ("on", "off", "1", "0", "true", "false"):
        raise ConfigError(f"safhire: shuffle must be on or off, not {shuffle!r}")
    shuffle_on = shuffle in ("on", "1", "true")
    if not shuffle_on:
        print("[safhire] WARNING: shuffle=off is INSECURE (model confidentiality analysis only, "
              "SAFHIRE Sec. 5 (i)): the client can read the weights", file=sys.stderr)
    residual = str(o.get("residual_rounds", "off")).lower()
    if residual not in ("on", "off", "1", "0", "true", "false"):
        raise ConfigError(f"safhire: residual_rounds must be on or off, not {residual!r}")
    name = str(o.get("he_params") or default_params(b, gamma))
    return {"b": b, "gamma": gamma, "shuffle": shuffle_on, "he_params": name, "threads": threads,
            "residual_rounds": residual in ("on", "1", "true"),
            "tile_mb": tile_mb, "out_mb": out_mb, "spill_dir": None if spill is None else str(spill),
            "log_rounds": str(o.get("log_rounds", "0")).lower() in ("1", "on", "true"),
            "allow_insecure_he": bool(o.get("allow_insecure_he", False))}


def _params(cfg: dict):
    from secinfer.crypto import he

    return he.get_params(cfg["he_params"], allow_insecure=cfg["allow_insecure_he"])


def log_delta(qm, params, gamma: int = 0) -> int:
    """Delta = 2^ld with every accumulator bound (|W v + bias| for in-range inputs) times Delta
    below q0 / 4, and far above the packing noise."""
    from secinfer.ir.quantize import log2_worst
    from secinfer.protocols.safhire.lwe import MIN_LOG_DELTA, backend

    ld = int(params.q[0]).bit_length() - 3 - log2_worst(qm)
    # the client's plaintexts |v| Delta must stay exact in float64 (|v| < 2^act_bits)
    ld = min(ld, 52 - qm.act_bits - 1)
    if ld < MIN_LOG_DELTA[backend(gamma)] + gamma:
        raise ConfigError(f"model accumulators need {log2_worst(qm)} bits: too wide for the "
                          f"{int(params.q[0]).bit_length()}-bit ciphertext modulus")
    return ld


def quantized_model(graph, cfg: dict, options: dict):
    """The server's quantized model (deterministic: resumption quantizes again). With the
    option ``qcache=DIR`` the result is kept in DIR under a hash of the model's structure,
    weights, b and calibration source (quantizing a ResNet by probing takes minutes)."""
    from secinfer.ir import quantize as Q
    from secinfer.ir.quantize_store import load_quantized, save_quantized

    cache = _qcache_file(graph, cfg, options)
    if cache is not None and cache.is_file():
        return load_quantized(cache)
    path = options.get("calib")
    if path:
        with np.load(str(path)) as z:
            if "X" not in z.files:
                raise ConfigError(f"calibration file {path} has no array 'X'")
            calib, desc = np.asarray(z["X"], dtype=np.float64), str(path)
    else:
        calib, desc = Q.default_calibration(graph, 64, PRG(_CALIB_SEED, "safhire/calibration"))
    small = sum(int(np.prod(v.shape)) for v in graph.initializers.values()) < 200_000
    res = bool(cfg.get("residual_rounds", False))     # a round per residual branch (issue 18)
    qm = Q.quantize_searched(graph, cfg["b"], calib, residual_rounds=res) if small else \
        Q.quantize(graph, cfg["b"], calib, residual_rounds=res)
    qm.calib["data"] = desc
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            save_quantized(qm, f)
        os.replace(tmp, cache)
    return qm


def _qcache_file(graph, cfg: dict, options: dict):
    d = options.get("qcache")
    if not d:
        return None
    h = hashlib.sha256(graph.public_bytes())
    for k in sorted(graph.initializers):
        h.update(k.encode() + np.ascontiguousarray(graph.initializers[k]).tobytes())
    calib = options.get("calib")
    if calib:
        h.update(Path(str(calib)).read_bytes())
    # q=3: structured maps (ConvMap), signed worst bound; q=4: pooling rounds (issue 18);
    # q=5: scales calibrated on the quantized model's own accumulators (issue 18)
    h.update(f"b={cfg['b']};q=5".encode())
    if cfg.get("residual_rounds"):
        h.update(b";residual_rounds")
    return Path(str(d)) / f"safhire-q-{h.hexdigest()[:24]}.npz"


def check_noise_margin(params, ld: int, gamma: int) -> dict:
    """The server's own measurement of the ring's packing noise (a throwaway key, 64 values):
    refuse a Delta that leaves less than 2^NOISE_MARGIN_BITS between the noise and one unit,
    rather than let the client's decryptions fail."""
    from secinfer.protocols.safhire.report import measure_packing_noise

    n = measure_packing_noise(params, ld, 64, reps=1, gamma=gamma)
    if not n["exact"] or (n["log2_max_abs"] is not None and n["log2_max_abs"] > ld - NOISE_MARGIN_BITS):
        seen = "beyond Delta / 2" if not n["exact"] else f"2^{n['log2_max_abs']:.1f}"
        raise ConfigError(f"safhire: packing noise on this ring reaches {seen}, too close to "
                          f"Delta = 2^{ld} (the model's worst-case accumulators leave no more); choose a ring "
                          f"with a wider modulus (he_params=...)")
    return n


# ---------------------------------------------------------------- server
def _run_server(ep, job: PartyJob) -> PartyResult:
    from secinfer.crypto import he
    from secinfer.protocols.safhire import lwe as L

    cfg = _config(job)
    store = SessionStore(job.options.get("sessions"))
    clock = OpClock(("extract", "unshuffle", "linear", "shuffle", "pack"))
    g, th = cfg["gamma"], cfg["threads"]
    key_switches = 0
    with ep.phase("setup"):
        hdr, sidb = ep.recv(CLIENT, "sh/hello", HDR, SID)
        setup_c0 = time.process_time()
        sid = bytes(sidb)
        kind, t_client = int(hdr[3]), int(hdr[0])
        qm = quantized_model(job.model, cfg, job.options)
        params = _params(cfg)
        ld = log_delta(qm, params, cfg["gamma"])
        noise = check_noise_margin(params, ld, cfg["gamma"])
        e_in = qm.width(0)
        replay = False
        if kind == HELLO:
            size = int(hdr[1])
            if t_client != 0 or size < 1 or size % e_in:
                raise ShapeError(f"client input has {size} values; the model takes {e_in} per sample")
            sess = ServerSession(sid, job.prg.derive("safhire/session-seed").seed(), 1, size // e_in,
                                 config=_public_cfg(cfg))
            resume_at = 1
        elif kind == RESUME:
            sess = store.load(sid)
            if sess.config != _public_cfg(cfg):
                raise ConfigError(f"resumed session ran with {sess.config}, this server with {_public_cfg(cfg)}")
            if t_client == sess.next_t - 1 and sess.last_reply:
                replay = True
            elif t_client < sess.next_t:
                raise StaleRoundError(f"server: client resumes at round {t_client}, the session is "
                                      f"at round {sess.next_t}")
            elif t_client > sess.next_t:
                raise SkippedRoundError(f"server: client resumes at round {t_client}, the session is "
                                        f"only at round {sess.next_t}")
            resume_at = t_client
        else:
            raise ProtocolError(f"server: first message must be a hello, got kind {kind}")
        meta = dict(qm.public(), he_params=cfg["he_params"], log_delta=ld, N=params.n,
                    gamma=cfg["gamma"], shuffle=cfg["shuffle"], samples=sess.samples,
                    resume_at=resume_at, replay=replay)
        ep.send(CLIENT, "sh/meta", header(resume_at, 0, 0, META), sidb,
                np.frombuffer(json.dumps(meta).encode(), np.uint8))
        hk, sk_sid, evk_b = ep.recv(CLIENT, "sh/keys", HDR, SID, _EVK)
        check_message(hk, sk_sid, sid, resume_at, KEYS, 0, "server <- client keys")
        evk = params.load(bytes(evk_b), he.EvalKeys)
        ev = he.Evaluator(params, evk)
        t0, c0 = time.perf_counter(), time.process_time()
        core = ServerRound(qm, params, ld, cfg["shuffle"], th, cfg["tile_mb"], cfg["out_mb"], cfg["spill_dir"])
        plan_s = {"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0}
        setup_cpu = time.process_time() - setup_c0
    R = len(qm.rounds)
    total = sess.samples * R
    per_round: list = []            # seconds by operation, per round run here (the bench's extrapolations)
    with ep.phase("online"):
        t = resume_at
        if replay:      # the answer the client lost; never recomputed [SAFHIRE Sec. 4.6]
            s, r = divmod(t - 1, R)
            ep.send(CLIENT, "sh/y", header(t, s, r, Y), sidb, *sess.last_reply)
            t += 1
        while t <= total:
            s, r = divmod(t - 1, R)
            ep.mark(round_mark(r, R, s, total // R, qm.rounds[r].relu))   # live progress line
            cpu_before, wall_before = dict(clock.cpu), dict(clock.wall)
            n_ct = L.chunks(qm.width(r), params.n) * L.cts_per_chunk(g)
            got = ep.recv(CLIENT, "sh/x", HDR, SID, *([_CT] * n_ct), timeout=max(ep.recv_timeout, ROUND_WAIT_S))
            check_message(got[0], got[1], sid, t, X, R, "server <- client")
            if r == 0:
                sess.saved = {}
            # the client's ciphertexts of v_r, kept as sent (compact: a later round's residual
            # addition extracts from them again) [SAFHIRE Sec. 4.4 steps 6-7]
            sess.saved[r] = [np.asarray(b, dtype=np.uint8) for b in got[2:]]
            with clock("extract"):
                cts = {c: L.load_cts(params, sess.saved[c], len(sess.saved[c])) for c in qm.rounds[r].sources}
            try:
                y = core.run(cts, sess.seed, s, r, g, clock)
            finally:
                for v in cts.values():
                    L.close_all(v)
            try:
                with clock("pack"):
                    out, ks = core.pack(ev, y, g)
                    key_switches += ks
                    blobs = L.to_wire(out)
                    L.close_all(out)
            finally:
                y.close()           # a spilled round's file goes with its descriptor
            del y
            ep.send(CLIENT, "sh/y", header(t, s, r, Y), sidb, *blobs)
            sess.next_t, sess.last_reply = t + 1, blobs
            per_round.append({"round": r, "cpu_s": {k: round(v - cpu_before.get(k, 0.0), 4) for k, v in clock.cpu.items()},
                              "wall_s": {k: round(v - wall_before.get(k, 0.0), 4) for k, v in clock.wall.items()},
                              "outputs": int(qm.rounds[r].n_out if r < R - 1 else qm.rounds[r].m), "tiles": len(core.tiles(r, params.n + L.cts_per_chunk(g)))})
            if cfg["log_rounds"]:       # a long run's per-round figures as they come (party log)
                print(f"[safhire] round {r + 1}/{R}: " + json.dumps(per_round[-1]), file=sys.stderr, flush=True)
            _trim_saved(sess, qm, r)
            store.save(sess)
            t += 1
        hb, bsid = ep.recv(CLIENT, "sh/bye", HDR, SID)
        check_message(hb, bsid, sid, total + 1, BYE, 0, "server <- client bye")
    store.drop(sid)
    ev.close()
    evk.close()
    return PartyResult(info={"timing_s": clock.wall, "cpu_s": clock.cpu, "setup_cpu_s": setup_cpu,
                             "plan_s": plan_s, "product_plan": [p.kinds() for p in core.plans],
                             "tiles": core.tile_counts(), "tile_mb": cfg["tile_mb"], "out_mb": cfg["out_mb"],
                             "spilled_rounds": core.spilled, "per_round": per_round, "rounds": R, "samples": sess.samples, "gamma": g,
                             "key_switches": key_switches, "backend": L.backend(g),
                             "b": qm.b, "act_bits": qm.act_bits, "weight_bits": qm.weight_bits,
                             "log_delta": ld, "he_params": cfg["he_params"], "calibration": qm.calib,
                             "setup_noise_log2_max": noise["log2_max_abs"],
                             "shuffle": cfg["shuffle"], "resumed_at": resume_at if kind == RESUME else None})


def _encrypt_wire(params, v, sk, ld: int, gamma: int) -> list:
    from secinfer.protocols.safhire import lwe as L

    cts = L.encrypt(params, v, sk, ld, gamma)
    blobs = L.to_wire(cts)
    L.close_all(cts)
    return blobs


def round_mark(r: int, R: int, s: int, samples: int, relu: bool) -> str:
    """The live progress mark of round r (0-based) of sample s: "round k/n op" [issue #21]."""
    op = "linear+relu" if relu and r < R - 1 else ("linear" if r < R - 1 else "linear+output")
    return f"round {r + 1}/{R} {op}" + (f" sample {s + 1}/{samples}" if samples > 1 else "")


def _public_cfg(cfg: dict) -> dict:
    return {k: cfg[k] for k in ("b", "gamma", "shuffle", "he_params")}


def _trim_saved(sess: ServerSession, qm, r: int) -> None:
    """Keep only the inputs a later round of this sample still reads."""
    later = {c for rd in qm.rounds[r + 1:] for c in rd.sources}
    sess.saved = {c: v for c, v in sess.saved.items() if c in later or c == r + 1}


# ---------------------------------------------------------------- client
def _finish(meta: dict, y: np.ndarray) -> np.ndarray:
    z = np.asarray(y, dtype=np.float64) * float(meta["s_out"])
    if meta["softmax"]:
        z = np.exp(z - z.max())
        z = z / z.sum()
    return z.reshape(meta["out_shape"])


def _run_client(ep, job: PartyJob) -> PartyResult:
    from secinfer.crypto import he
    from secinfer.ir.quantize import client_step, wrap
    from secinfer.protocols.safhire import lwe as L

    cfg = _config(job)
    ck_path = job.options.get("checkpoint")
    x = np.asarray(job.input, dtype=np.float64)
    digest = hashlib.sha256(x.tobytes() + str(x.shape).encode()).hexdigest()
    ck = load_checkpoint(ck_path)
    if ck is not None and ck.get("digest") != digest:
        raise ConfigError(f"checkpoint {ck_path} belongs to another input; remove it to start afresh")
    timing = dict.fromkeys(("encrypt", "decrypt", "client_ops", "keys"), 0.0)
    cpu0 = time.process_time()
    with ep.phase("setup"):
        if ck is None:
            sid = job.prg.derive("safhire/session-id").bytes(SID_BYTES)
            ep.send(SERVER, "sh/hello", header(0, x.size, 0, HELLO), sid_array(sid))
            t_start = 1
        else:
            sid = bytes(ck["sid"])
            t_start = int(ck["next_t"])
            ep.send(SERVER, "sh/hello", header(t_start, x.size, 0, RESUME), sid_array(sid))
        # the server quantizes the model first (minutes for a ResNet without qcache): wait
        # longer than a normal receive; a dead server is still noticed by its heartbeats
        hm, msid, raw = ep.recv(SERVER, "sh/meta", HDR, SID, ArraySpec(np.uint8, (None,), max_elems=_MAX_META),
                                timeout=max(ep.recv_timeout, SETUP_WAIT_S))
        check_message(hm, msid, sid, t_start, META, 0, "client <- server meta")
        meta = json.loads(bytes(raw).decode())
        for k in ("b", "gamma", "shuffle", "he_params"):
            if meta[k] != cfg[k]:
                raise ConfigError(f"server runs {k}={meta[k]!r}, this client asked for {cfg[k]!r}")
        params = _params(cfg)
        if meta["N"] != params.n:
            raise ProtocolError("server announced another ring degree")
        t0 = time.perf_counter()
        if ck is None:
            kp = params.keygen()
            sk = kp.sk
            kp.pk.close()
        else:
            sk = params.load(bytes(ck["sk"]), he.SecretKey)
        evk = L.eval_keys(params, sk, cfg["gamma"])
        timing["keys"] = time.perf_counter() - t0
        ep.send(SERVER, "sh/keys", header(t_start, 0, 0, KEYS), sid_array(sid),
                np.frombuffer(evk.to_bytes(), np.uint8))
        evk.close()
    rounds = meta["rounds"]
    R = len(rounds)
    e_in = int(np.prod(meta["in_shape"]))
    if x.size % e_in:
        raise ShapeError(f"input of {x.size} values is not a whole number of {e_in}-value samples")
    xs = x.reshape(-1, e_in)
    scale = np.asarray(meta["in_scale"], dtype=np.float64).reshape(1, -1)
    if scale.shape[1] != e_in or not np.all(scale > 0):
        raise ProtocolError("server announced malformed input scales")
    zero = 0.0 if meta.get("in_zero") is None else np.asarray(meta["in_zero"], np.float64).reshape(1, -1)
    xq = np.clip(np.rint((xs - zero) / scale), meta["in_lo"], meta["in_hi"]).astype(np.int64)
    b, ld = int(meta["b"]), int(meta["log_delta"])
    total = meta["samples"] * R
    state = ck or {"sid": sid_array(sid), "digest": digest, "outputs": [], "finals": [],
                   "noise": [[0.0, 0.0, 0] for _ in range(R)]}
    state["sk"] = np.frombuffer(sk.to_bytes(), np.uint8)
    trace: list = []
    cur = state.get("cur")
    with ep.phase("online"):
        t = t_start
        while t <= total:
            s, r = divmod(t - 1, R)
            rd = rounds[r]
            ep.mark(round_mark(r, R, s, total // R, rd["relu"]))
            if r == 0:
                cur = xq[s]
            if not (meta["replay"] and t == t_start):
                blobs, dt = timed(_encrypt_wire, params, cur, sk, ld, cfg["gamma"])
                timing["encrypt"] += dt
                ep.send(SERVER, "sh/x", header(t, s, r, X), sid_array(sid), *blobs)
            n_out = rd["n_out"] if r < R - 1 else rd["m"]
            # a ResNet round is minutes of server work on a loaded machine; heartbeats still
            # catch a dead server
            got = ep.recv(SERVER, "sh/y", HDR, SID, *([_CT] * L.chunks(n_out, params.n)),
                          timeout=max(ep.recv_timeout, ROUND_WAIT_S))
            check_message(got[0], got[1], sid, t, Y, R, "client <- server")
            t0 = time.perf_counter()
            cts = L.load_cts(params, got[2:], L.chunks(n_out, params.n))
            vals, noise = L.decrypt(params, cts, sk, ld, n_out)
            L.close_all(cts)
            if noise.size and float(np.max(np.abs(noise))) > MAX_NOISE_UNITS:
                raise L.DecryptionMarginError(
                    f"round {t}: decryption noise reached {float(np.max(np.abs(noise))):.3f} of a unit "
                    f"(limit {MAX_NOISE_UNITS}): the ring's noise is too large for Delta = 2^{ld}")
            t1 = time.perf_counter()
            timing["decrypt"] += t1 - t0
            y = wrap(vals, b)
            nz = state["noise"][r]
            nz[0] = max(nz[0], float(np.max(np.abs(noise))))
            nz[1] += float(np.sum(noise ** 2))
            nz[2] += int(noise.size)
            if job.options.get("trace"):
                trace.append(y)
            if r == R - 1:
                state["outputs"].append(_finish(meta, y).tolist())
                state["finals"].append(y.tolist())
            else:
                cur = client_step(y, rd["relu"], rd["k"], rd["eta"], rd["lo"], rd["hi"])
            timing["client_ops"] += time.perf_counter() - t1
            t += 1
            state["next_t"], state["cur"] = t, np.asarray(cur, dtype=np.int64)
            save_checkpoint(ck_path, state)
        ep.send(SERVER, "sh/bye", header(total + 1, 0, 0, BYE), sid_array(sid))
    sk.close()
    out = np.asarray(state["outputs"], dtype=np.float64)
    noise_rep = []
    for r, (mx, ss, cnt) in enumerate(state["noise"]):
        sd = (ss / cnt) ** 0.5 if cnt else 0.0
        noise_rep.append({"round": r, "n": rounds[r]["n_out"] if r < R - 1 else rounds[r]["m"],
                          "max_abs": mx, "std": sd, "log2_std_abs": (np.log2(sd) + ld) if sd else None,
                          "dp": dp.theorem2(sd, rounds[r]["n_out"]) if r < R - 1 else None})
    info = {"timing_s": timing, "cpu_s_total": time.process_time() - cpu0, "rounds": R, "samples": meta["samples"], "b": b, "log_delta": ld,
            "noise": noise_rep, "finals": state["finals"], "resumed_at": t_start if ck else None}
    if job.options.get("trace"):
        info["trace"] = [v.tolist() for v in trace]
    return PartyResult(output=out, output_ring=None, info=info)


# ---------------------------------------------------------------- spec
run_party = by_role("safhire", {SERVER: _run_server, CLIENT: _run_client})


def check_model(graph, security: str) -> None:
    from secinfer.ir.quantize import split_rounds

    if security != "semi-honest":
        raise ConfigError("safhire offers security 'semi-honest' (semi-honest server; the model "
                          "is protected from an adversarial client by shuffling)")
    split_rounds(graph)


SPEC = ProtocolSpec(
    name="safhire",
    description="hybrid FHE: linear layers on RLWE/LWE at the server, ReLU/max pooling in the clear "
                "at the client, outputs shuffled for model confidentiality",
    roles=(SERVER, CLIENT),
    model_role=SERVER,
    input_role=CLIENT,
    securities=("semi-honest",),
    default_security="semi-honest",
    run_party=run_party,
    check_model=check_model,
    paper="safhire-hybrid-fhe.txt",
    demo_rows=8,
    option_warnings=lambda options: (
        ["WARNING: shuffle=off is INSECURE for 'safhire': the client can read the model's weights "
         "(analysis mode only, SAFHIRE Sec. 5 (i))"]
        if str(options.get("shuffle", "on")).lower() in ("off", "0", "false") else []),
    oracle=lambda graph, x, options: __import__(
        "secinfer.protocols.safhire.report", fromlist=["demo_oracle"]).demo_oracle(graph, x, options),
    inspect=lambda graph: __import__(
        "secinfer.protocols.safhire.report", fromlist=["inspect_lines"]).inspect_lines(graph),
)
