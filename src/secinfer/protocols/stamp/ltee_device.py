"""EMULATION of STAMP's lightweight trusted device (LTEE) [STAMP 3.3, 4.1-4.5].

No LTEE hardware exists on these machines. This module is the device's firmware,
run as its own OS process (``python -m secinfer.protocols.stamp.ltee_device``) with its
own memory and keys; its only interface is the bus: length-prefixed secinfer frames on
its stdin/stdout pipe, which only its host party holds (option ``stamp_ltee`` "inprocess":
the same ``Device`` and ``serve`` inside the host's process, ``ltee_inproc``). Nothing here is trusted
hardware: the host's operating system can read this process's memory. The emulation
reproduces the device's *behaviour* (what it keeps secret from its host, what it
refuses) and lets the cost model charge the bytes and operations a real device would.

State kept inside the device, never sent to the host:
* the identity key (Ed25519) certified by the manufacturer CA, and the CA public key;
* the pairwise PRF keys k_0 = k_{0,1}, k_1 = k_{1,2}, k_2 = k_{2,0} [STAMP Protocol 1];
* the counters ctr_0, ctr_1, ctr_2, ctr_s and, for the malicious setting, the
  duplicated counters ctr^_0, ctr^_1, ctr^_2, ctr^_s [Protocols 2-3, 4.2].

Release rules (what the host may obtain), with d this device's party index:
* masks of stream j (GenMask, Protocol 2) only if party d holds share component j
  (d in {j, j-1});
* a device unmasks only stream d-1 (the one component its host lacks), and only once
  per operation; the real output share goes to a component fixed by d, never chosen
  by the host;
* a component of an output zero-sharing is never released to a host that would then
  hold the component carrying the real value;
* a plaintext leaves a device only in the fused output step (``cmd_output``): in the
  LTEE of the output party fixed at initialisation (p1, the only party that learns the
  output), at most once per session, and only as the truncation (and bias) of a product
  whose masked components the other two hosts sent under output masks that no device
  releases to the output party's host; in the malicious setting only if the other two
  LTEEs' MACs vouch for every vector the output party's host passes in;
* rho = y - A for an activation mask A (the next product's triple operand, malicious)
  only from an evaluation, with A's label bound to the operation, the job's slot and the
  job's leader as this device infers it from its own index and role -- so only the two
  LTEEs that legitimately evaluate a job ever compute y - A for that job's A.
Every request names the operation number and the counter it expects; an older
operation or a counter that does not match is refused (stale counter), and each kind
of request is served once per operation.
"""

from __future__ import annotations

import gc
import hashlib
import hmac
import json
import math
import os
import struct
import sys
import threading
import time

import numpy as np
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.cmac import CMAC
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from secinfer.arith.fixed import FixedPointConfig
from secinfer.crypto.prg import PRF
from secinfer.errors import FixedPointRangeError, FrameError, ProtocolError
from secinfer.protocols.stamp.ltee_ahead import AheadMemo
from secinfer.protocols.stamp.ltee_bound import BoundRequests
from secinfer.protocols.stamp.ltee_counters import CounterDiscipline, Refused
from secinfer.protocols.stamp.ltee_bus import (  # noqa: F401 - re-exported for host and tests
    BATCHABLE, EXP_BITS, MANT_BITS, OUT_MAC_DOMAIN, SLOTS, STREAMS, cert_message, dh_message, expand, label_prefix,
    prf_elements, read_frame, seeds_array, write_frame, zero_component)
from secinfer.protocols.stamp.ltee_bus import MAX_BUS_SPIN_US, BusPipe
from secinfer.protocols.stamp.ltee_softmax import softmax_step
from secinfer.protocols.stamp.ltee_requests import (  # noqa: F401
    SPEC_CACHE, _blob, _kernels, _OpCount, _parse_spec, _preload_kernels, _ring_in)


class Device(CounterDiscipline, AheadMemo, BoundRequests):
    def __init__(self) -> None:
        self._identity = Ed25519PrivateKey.generate()  # the device's own TRNG (OS CSPRNG here)
        self.identity_pub = self._identity.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        self.cert: bytes | None = None
        self.ca_pub: bytes | None = None
        self.index: int | None = None
        self.session: bytes | None = None
        self.cfg: FixedPointConfig | None = None
        self._eph: dict[int, X25519PrivateKey] = {}
        self._keys: dict[int, bytes] = {}
        self._prf: dict[int, PRF] = {}
        # F_k(label, ctr)'s single block AES_k(prefix(label) || ctr) (``_seed``): one ECB
        # encryptor per pairwise key and the labels' prefixes, made once
        self._ecb: dict[int, object] = {}
        self._prefix: dict[str, bytes] = {}
        # counters [Protocols 2-3]: plain and duplicated (hat) families
        self.ctr = {(s, h): 0 for s in STREAMS for h in (0, 1)}
        self.op_last = -1
        self.op_n = 0
        self.op_base: dict = {}
        self.used: set = set()
        # operations reserved ahead of time by ``cmd_prefetch``: op -> [n_op, first counter, used]
        self.reserved: dict[int, list] = {}
        self._prefetching = False
        self.cnt = _OpCount()
        self.aes_bytes = 0
        self.busy = 0.0
        self.out_party: int | None = None   # the only party whose LTEE releases a plaintext output
        self.malicious = False
        self.output_done = False
        self.preload: threading.Thread | None = None   # the kernels' import (``main``), joined by ``ready``
        self.specs: dict = {}   # operation specs validated, by their bytes (``_parse_spec``, ``cmd_specs``)
        self.chains: dict = {}  # their chains parsed (``kernels.Chain``), by the same bytes (``_chain``)
        self.spin_s = 0.0   # busy-poll budget of a wait after an online request (``cmd_ready``)
        self._init_ahead()  # seeds and expansions of announced requests (``ltee_ahead``, ``cmd_expect``)
        self._init_bound()  # their dispatch prepared (``ltee_bound``)

    # ---- helpers -------------------------------------------------------------------------
    def _need_ready(self) -> None:
        if self.index is None or len(self._prf) != 3:
            raise Refused("not-initialised", "Protocol 1 has not completed")

    def _seed(self, j: int, label: str, ctr: int) -> bytes:
        """Stream seed F_{k_j}(label, ctr): the mask vector of Protocol 2 for this counter
        slot is its AES-CTR expansion, so the device can hand a host the 16-byte seed
        instead of the vector (same knowledge, far fewer bus bytes)."""
        self.aes_bytes += 16
        ecb = self._ecb.get(j) or self._ecb_of(j)
        pre = self._prefix.get(label) or self._prefix_of(label)
        if not 0 <= ctr < 1 << 64:
            raise Refused("bad-request", "counter out of range")
        if self._kept_seeds:   # computed ahead for an announced request (``cmd_expect``): the same block
            hit = self._kept_seeds.get((j, label, ctr))
            if hit is not None:
                return hit
        # = PRF(k_j).keystream(label, ctr, 16): a CTR keystream's first block is AES_k(IV)
        return ecb.update(pre + ctr.to_bytes(8, "big"))

    def _ecb_of(self, j: int):
        """``_seed``'s AES context for k_j, made once (at ``cmd_ready`` or first use)."""
        ecb = self._ecb.get(j)
        if ecb is None:
            ecb = self._ecb[j] = Cipher(algorithms.AES(self._keys[j]), modes.ECB()).encryptor()
        return ecb

    def _prefix_of(self, label: str) -> bytes:
        """``_seed``'s fixed prefix of ``label``, made once."""
        pre = self._prefix.get(label)
        if pre is None:
            pre = self._prefix[label] = label_prefix(label)
        return pre

    def _elems(self, j: int, label: str, ctr: int, n: int) -> np.ndarray:
        self.aes_bytes += 8 * n
        return self._expand(self._seed(j, label, ctr), n)

    def _zero_comp(self, comp: int, label: str, ctr: int, n: int, bits: int) -> np.ndarray:
        """Component ``comp`` of a zero-sharing: F_{k_c}(ctr) - F_{k_{c+1}}(ctr) [STAMP Protocol 3]."""
        a = self._elems(comp, label, ctr, n)
        b = self._elems((comp + 1) % 3, label, ctr, n)
        self.cnt.int_ops += n
        return (a - b) & np.uint64((1 << bits) - 1) if bits < 64 else a - b

    # ---- Protocol 1 ----------------------------------------------------------------------
    def cmd_identity(self, arrays):
        return [np.frombuffer(self.identity_pub, dtype=np.uint8)]

    def cmd_provision(self, arrays):
        """Factory step: the manufacturer installs its certificate and root key (once)."""
        if self.cert is not None:
            raise Refused("already-provisioned")
        cert, ca_pub = _blob(arrays[0]), _blob(arrays[1])
        if len(cert) != 64 or len(ca_pub) != 32:
            raise Refused("bad-request", "certificate or CA key size")
        self.cert, self.ca_pub = cert, ca_pub
        return []

    def cmd_init(self, arrays):
        """meta = [party index, ring bits, fractional bits, output party, malicious]; the
        output party and the security level are public parameters of the session, fixed
        here for the whole session (``cmd_output``)."""
        if self.index is not None:
            raise Refused("already-initialised")
        if self.cert is None:
            raise Refused("not-provisioned", "no manufacturer certificate")
        meta, session = arrays[0], _blob(arrays[1])
        if meta.shape != (5,):
            raise Refused("bad-request", "initialisation parameters")
        idx, bits, frac, out_party, mal = (int(v) for v in meta)
        if idx not in (0, 1, 2) or out_party not in (0, 1, 2) or mal not in (0, 1) or len(session) != 16:
            raise Refused("bad-request", "party index, output party, security or session id")
        self.index, self.session = idx, session
        self.out_party, self.malicious = out_party, bool(mal)
        self.cfg = FixedPointConfig("device", bits, frac)
        return []

    def cmd_dh_offer(self, arrays):
        peer = int(arrays[0][0])
        if self.index is None or peer not in (0, 1, 2) or peer == self.index or peer in self._eph:
            raise Refused("bad-request", "key exchange peer")
        eph = X25519PrivateKey.generate()
        self._eph[peer] = eph
        pub = eph.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        sig = self._identity.sign(dh_message(self.session, self.index, peer, pub))
        u8 = lambda b: np.frombuffer(b, dtype=np.uint8)  # noqa: E731
        return [u8(pub), u8(sig), u8(self.identity_pub), u8(self.cert)]

    def cmd_dh_accept(self, arrays):
        peer = int(arrays[0][0])
        if peer not in self._eph or peer in self._keys:
            raise Refused("bad-request", "no pending key exchange with that peer")
        eph_pub, sig, ident, cert = (_blob(a) for a in arrays[1:5])
        try:
            Ed25519PublicKey.from_public_bytes(self.ca_pub).verify(cert, cert_message(ident))
        except (InvalidSignature, ValueError):
            raise Refused("certificate", f"LTEE of party {peer} has no valid manufacturer certificate") from None
        try:
            Ed25519PublicKey.from_public_bytes(ident).verify(sig, dh_message(self.session, peer, self.index, eph_pub))
        except (InvalidSignature, ValueError):
            raise Refused("key-exchange", f"bad key-exchange signature from party {peer}") from None
        shared = self._eph.pop(peer).exchange(X25519PublicKey.from_public_bytes(eph_pub))
        lo, hi = sorted((self.index, peer))
        j = lo if hi == lo + 1 else hi  # k_j is shared by j and j+1 (k_2 by 2 and 0)
        self._keys[j] = HKDF(SHA256(), 16, self.session, b"secinfer/stamp/k%d" % j).derive(shared)
        self._prf[j] = PRF(self._keys[j])
        return []

    def cmd_wrap(self, arrays):
        """Send k_d to device d-1 encrypted and authenticated under k_{d-1} [STAMP Protocol 1 step 3]."""
        d = self.index
        if d is None or d not in self._keys or (d - 1) % 3 not in self._keys:
            raise Refused("bad-request", "pairwise keys missing")
        kprev = self._keys[(d - 1) % 3]
        pad = prf_elements(PRF(kprev), "wrap", 0, 2).tobytes()
        ct = bytes(a ^ b for a, b in zip(self._keys[d], pad))
        tag = hmac.new(kprev, b"wrap" + self.session + ct, hashlib.sha256).digest()
        return [np.frombuffer(ct, dtype=np.uint8), np.frombuffer(tag, dtype=np.uint8)]

    def cmd_unwrap(self, arrays):
        d = self.index
        ct, tag = _blob(arrays[0]), _blob(arrays[1])
        if d is None or d not in self._keys or len(ct) != 16:
            raise Refused("bad-request", "cannot unwrap now")
        k = self._keys[d]
        if not hmac.compare_digest(tag, hmac.new(k, b"wrap" + self.session + ct, hashlib.sha256).digest()):
            raise Refused("key-exchange", "wrapped key fails authentication")
        pad = prf_elements(PRF(k), "wrap", 0, 2).tobytes()
        j = (d + 1) % 3
        self._keys[j] = bytes(a ^ b for a, b in zip(ct, pad))
        self._prf[j] = PRF(self._keys[j])
        return []

    # ---- GenMask / GenMaskShare [Protocols 2-3] ------------------------------------------
    def cmd_mask(self, arrays):
        """meta = [op, n_op, ctr, sub, j, hat, n, kind]; kind 0 ring masks, 1 exp masks (alpha, beta)."""
        self._need_ready()
        meta = arrays[0]
        j, hat, n, kind = int(meta[4]), int(meta[5]), int(meta[6]), int(meta[7])
        if j not in (0, 1, 2) or hat not in (0, 1) or not 0 <= n <= int(meta[1]) // SLOTS:
            raise Refused("bad-request", "mask request")
        if self.index not in (j, (j - 1) % 3):
            raise Refused("policy", f"party {self.index} does not hold component {j}")
        ctr = self._begin(meta, f"mask{j}", (f"k{j}", hat))
        u8 = lambda b: np.frombuffer(b, dtype=np.uint8)  # noqa: E731
        if kind == 0:
            return [u8(self._seed(j, f"m/{hat}", ctr))]
        return [u8(self._seed(j, f"ma/{hat}", ctr)), u8(self._seed(j, f"mb/{hat}", ctr))]

    def cmd_inmask(self, arrays):
        """Zero-share input mask for the 3-out-of-3 path, labelled by the evaluator e."""
        self._need_ready()
        meta = arrays[0]
        e, n = int(meta[4]), int(meta[5])
        if e not in (0, 1, 2) or e == self.index or not 0 <= n <= int(meta[1]) // SLOTS:
            raise Refused("policy", "the evaluator never receives input masks")
        ctr = self._begin(meta, "inmask", ("s", 0))
        d = self.index
        return [seeds_array({c: self._seed(c, f"in/{e}", ctr) for c in (d, (d + 1) % 3)})]

    def cmd_zshare(self, arrays):
        """Output zero-share components (d, d+1) except the real-value component t."""
        self._need_ready()
        meta = arrays[0]
        t, hat, n = int(meta[4]), int(meta[5]), int(meta[6])
        if t not in (0, 1, 2) or not 0 <= n <= int(meta[1]) // SLOTS:
            raise Refused("bad-request", "zero-share request")
        ctr = self._begin(meta, "zshare", ("s", 0))
        d = self.index
        need = set()
        for comp in (d, (d + 1) % 3):
            if comp != t:
                need |= {comp, (comp + 1) % 3}
        return [seeds_array({c: self._seed(c, f"out/{t}", ctr) for c in need})]

    def cmd_pad(self, arrays):
        """Pad released only to its recipient's own host (malicious step 5 forwarding)."""
        self._need_ready()
        meta = arrays[0]
        n = int(meta[4])
        if not 0 <= n <= int(meta[1]) // SLOTS:
            raise Refused("bad-request", "pad size")
        ctr = self._begin(meta, "pad", ("s", 1))
        return [np.frombuffer(self._seed(self.index, f"pad/{self.index}", ctr), dtype=np.uint8)]

    # ---- the fused output step: last product, truncation and opening to the output party ----
    def _out_ready(self, meta: np.ndarray, n: int) -> int:
        """Common checks of the output-step requests; returns the output party r."""
        self._need_ready()
        if self.out_party is None or not 0 <= n <= int(meta[1]) // SLOTS:
            raise Refused("bad-request", "output-step request")
        return self.out_party

    def cmd_outmask(self, arrays):
        """Masks a non-receiving host puts on what it sends to the output party r in the
        fused output step. meta = [op, n_op, ctr, sub, mode, n].

        mode 0 (semi-honest; the input is a 3-out-of-3 product): this party's components of
        a zero-sharing labelled for r, as GenMaskShare gives them [STAMP Protocol 5 step 2];
        mode 1 (malicious; the input is the verified 2-out-of-3 product): GenMask of stream
        r-1, the component r lacks, held by the two non-receivers [STAMP Protocol 4 step 1].
        Labels differ from every other step's, so these masks cancel only in ``cmd_output``;
        the output party's host never receives them (it would unmask the product)."""
        meta = arrays[0]
        mode, n = int(meta[4]), int(meta[5])
        r = self._out_ready(meta, n)
        d = self.index
        if d == r:
            raise Refused("policy", "the output party never receives output masks")
        if mode != int(self.malicious):
            raise Refused("policy", "output masks of the other security setting")
        if mode == 0:
            ctr = self._begin(meta, "outmask", ("s", 0))
            return [seeds_array({c: self._seed(c, f"fin/{r}", ctr) for c in (d, (d + 1) % 3)})]
        j = (r - 1) % 3          # its holders are j and j-1 = r+1: the two non-receivers
        ctr = self._begin(meta, "outmask", (f"k{j}", 0))
        return [np.frombuffer(self._seed(j, "mf", ctr), dtype=np.uint8)]

    def _out_mac(self, sender: int, ctr: int, v: np.ndarray) -> bytes:
        """AES-CMAC of a vector the sender's host sends towards the output party's LTEE,
        under a key only the LTEEs derive (from k_j, the pairwise key of sender and output
        party), bound to the session, the counter slot, both parties and the length."""
        r = self.out_party
        j = sender if (sender + 1) % 3 == r else r
        key = self._prf[j].keystream(f"outmac/{sender}/{r}", ctr, 16)
        mac = CMAC(algorithms.AES(key))
        mac.update(OUT_MAC_DOMAIN + self.session + struct.pack("<qqqq", sender, r, ctr, v.size))
        mac.update(np.ascontiguousarray(v, dtype=np.uint64).tobytes())
        self.aes_bytes += 16 + 8 * v.size
        return mac.finalize()

    def cmd_outmac(self, arrays):
        """Malicious output step: the MAC of this host's vector (``_out_mac``): party r-1's
        c = z_{r-1} + m + z_r, party r+1's own component z_{r+1}. meta = [op, n_op, ctr, sub, n];
        arrays[1] = the vector. The output party's LTEE then uses exactly these vectors or
        refuses, whatever its host passes in."""
        meta = arrays[0]
        n = int(meta[4])
        r = self._out_ready(meta, n)
        if self.index == r or not self.malicious:
            raise Refused("policy", "output MACs come from the two non-receivers of a malicious session")
        v = _ring_in(arrays[1], n)
        ctr = self._begin(meta, "outmac", ("s", 0))
        return [np.frombuffer(self._out_mac(self.index, ctr, v), dtype=np.uint8)]

    def cmd_output(self, arrays):
        """The fused output step in the output party's LTEE [STAMP Protocol 5 steps 4-5, with the
        opening to the output party in place of the re-sharing]: unmask the product,
        truncate exactly, add the bias and return the plaintext output to this host.
        meta = [op, n_op, ctr, sub, mode]; arrays[1] = JSON spec (steps: trunc, then
        optionally bias -- the last linear layer, nothing else); then the payload:

        mode 0 (semi-honest): s = the two others' masked 3-out-of-3 components + ours;
        mode 1 (malicious): c = z_{r-1} + m + z_r (from party r-1), z_{r+1} (ours), and the
        MACs of parties r-1 (over c) and r+1 (over z_{r+1}); a MAC that fails is refused.
        Only in the output party's LTEE, at most once per session (the attempt counts)."""
        kernels = _kernels()
        meta = arrays[0]
        mode = int(meta[4])
        r = self._out_ready(meta, 0)
        d = self.index
        if d != r:
            raise Refused("policy", f"only the output party's LTEE releases the output (party {r})")
        if self.output_done:
            raise Refused("policy", "the output was already released in this session")
        if mode != int(self.malicious):
            raise Refused("policy", "output step of the other security setting")
        key = _blob(arrays[1])            # the spec's bytes: its caches' key
        spec = _parse_spec(kernels, key, self.specs)
        steps = [st.get("op") for st in spec["steps"]]
        if steps and steps[0] == "shadow-check":    # the range guard's check of this last product
            steps = steps[1:]
        if steps not in (["trunc"], ["trunc", "bias"]):
            raise Refused("policy", "the output step runs the truncation and bias of a product only")
        ring = self.cfg.ring
        n_in = math.prod(spec["shape"]) + kernels.n_params(spec)
        slot = int(meta[1]) // SLOTS
        if n_in > slot or math.prod(kernels.out_shape(spec)) > slot:
            raise Refused("bad-request", "payload larger than the operation")
        if mode == 0:
            ctr = self._begin(meta, "output", ("s", 0))
            self.output_done = True
            s = _ring_in(arrays[2], n_in)
            seeds = {c: self._seed(c, f"fin/{d}", ctr) for c in (d, (d + 1) % 3)}
            self.aes_bytes += 16 * n_in
            x = ring.add(s, self._zero(seeds, d, n_in))
            self.cnt.int_ops += n_in
        else:
            j = (d - 1) % 3
            ctr = self._begin(meta, "output", (f"k{j}", 0))
            self.output_done = True
            if len(arrays) != 6:
                raise Refused("bad-request", "malicious output payload")
            c, own = _ring_in(arrays[2], n_in), _ring_in(arrays[3], n_in)
            mctr = self._slot(("s", 0), int(meta[3]))
            for sender, v, tag in ((j, c, arrays[4]), ((d + 1) % 3, own, arrays[5])):
                if not hmac.compare_digest(_blob(tag), self._out_mac(sender, mctr, v)):
                    raise Refused("output-mac", f"a vector does not carry party {sender}'s LTEE MAC")
            x = ring.sub(ring.add(c, own), self._elems(j, "mf", ctr, n_in) & ring.mask)
            self.cnt.int_ops += 2 * n_in
        return [self._chain(kernels, key, spec, x).reshape(-1)]

    # ---- evaluation [Protocols 4-6 step 4/5 "LTEE only"] ---------------------------------
    def cmd_eval(self, arrays):
        """meta = [op, n_op, ctr, sub, mode, hat]; arrays[1] = JSON spec; then the payload.

        mode 0: RSS path, payload s = x'_{d-1} + x_d + x_{d+1} (masked with stream d-1);
        mode 1: 3-out-of-3 path, payload s = sum of zero-masked components but ours;
        mode 2: exp split, payload (q* + q^, m*, m^) [STAMP Protocol 6].
        """
        self._need_ready()
        kernels = _kernels()
        meta = arrays[0]
        mode, hat, sub = int(meta[4]), int(meta[5]), int(meta[3])
        if mode not in (0, 1, 2) or hat not in (0, 1) or (mode == 1 and hat == 1):
            raise Refused("bad-request", "evaluation mode")
        key = _blob(arrays[1])            # the spec's bytes: its caches' key
        spec = _parse_spec(kernels, key, self.specs)
        d = self.index
        cfg = self.cfg
        ring = cfg.ring
        j = (d - 1) % 3
        n_in = math.prod(spec["shape"]) + kernels.n_params(spec)
        if (mode == 2) != (spec["steps"] == [{"op": "softmax"}]):
            raise Refused("bad-request", "the exp path runs exactly the softmax step")
        if n_in > int(meta[1]) // SLOTS:
            raise Refused("bad-request", "payload larger than the operation")
        if mode == 0:
            ctr = self._begin(meta, "eval", (f"k{j}", hat))
            s = _ring_in(arrays[2], n_in)
            x = ring.sub(s, self._elems(j, f"m/{hat}", ctr, n_in) & ring.mask)
            self.cnt.int_ops += n_in
            y = self._chain(kernels, key, spec, x)
        elif mode == 1:
            ctr = self._begin(meta, "eval", ("s", 0))
            s = _ring_in(arrays[2], n_in)
            seeds = {c: self._seed(c, f"in/{d}", ctr) for c in (d, (d + 1) % 3)}
            self.aes_bytes += 16 * n_in
            x = ring.add(s, self._zero(seeds, d, n_in))
            self.cnt.int_ops += n_in
            y = self._chain(kernels, key, spec, x)
        else:
            ctr = self._begin(meta, "eval", (f"k{j}", hat))
            y = softmax_step(self, spec, arrays[2:5], j, hat, ctr)
        y = y.reshape(-1)
        n_out = y.size
        t = (d + 1) % 3 if hat == 0 else (d + 2) % 3
        octr = self._slot(("s", 0), sub)
        if n_out > self._slot_size():
            raise Refused("bad-request", "output larger than the operation slot")
        if spec.get("act"):
            return self._act_result(meta, mode, hat, sub, y)
        seeds = {c: self._seed(c, f"out/{t}", octr) for c in range(3)}
        self.aes_bytes += 16 * n_out
        real = ring.add(y, self._zero(seeds, t, n_out))
        self.cnt.int_ops += 2 * n_out
        if hat == 0:   # the evaluator's pair (x_d, x_{d+1}): x_d from seeds, x_{d+1} the real component
            return [seeds_array({c: seeds[c] for c in (d, (d + 1) % 3)}), real]
        pad = self._elems(t, f"pad/{t}", self._slot(("s", 1), sub), n_out) & ring.mask
        return [seeds_array(seeds), ring.add(real, pad)]

    def _chain(self, kernels, key: bytes, spec, x):
        """The chain, with the range guard's refusal (``kernels.shadow_check``: a sum of this
        session's query left the ring) as code "range". The spec's ``kernels.Chain`` is parsed
        once per spec bytes (``cmd_specs`` parses the shipped ones before the online phase)."""
        try:
            return self._chain_of(kernels, key, spec)(x, self.cnt)
        except FixedPointRangeError as e:
            raise Refused("range", str(e)[:1500]) from None

    def _chain_of(self, kernels, key: bytes, spec: dict):
        chain = self.chains.get(key)
        if chain is None:
            chain = kernels.Chain(self.cfg, spec)
            if len(self.chains) >= SPEC_CACHE:
                self.chains.clear()
            self.chains[key] = chain
        return chain

    def _act_result(self, meta: np.ndarray, mode: int, hat: int, sub: int, y: np.ndarray) -> list:
        """Malicious, the result y feeds products only: share it as A + rho, with A the
        first operand mask of the next product's triple (``_act_comps``) and rho = y - A
        public, instead of a fresh zero-sharing [docs: stamp.md, "rho from the LTEEs"].
        The evaluator (hat 0) gets the real component A_t + rho (t = d+1, the third party,
        receives it from its host), the leader (hat 1) gets rho itself, which the third party
        compares with A_t + rho - A_t; every other component of the sharing is a component
        of A, which each host already holds. rho is what the next product's check would
        open, so nothing new is revealed and the opening is saved."""
        if mode != 0 or not self.malicious:
            raise Refused("policy", "activation masks are for the malicious replicated path")
        d, ring = self.index, self.cfg.ring
        leader = (d - 1) % 3 if hat == 0 else d
        comps = self._act_comps(int(meta[0]), sub, leader, y.size)
        rho = ring.sub(y, ring.reduce(comps[0] + comps[1] + comps[2]))
        self.cnt.int_ops += 3 * y.size
        return [ring.add(comps[(d + 1) % 3], rho)] if hat == 0 else [rho]

    def _operand(self, name: str, spec: dict, ctr: int, n: int) -> list:
        """The three components of triple operand ``name`` (a or b). With ``<name>_id`` the
        operand is named: derived from that name alone, so later triples can share it (the
        model weights' b, an activation's a; see ``Engine.reshare_verified``); else it is
        fresh at the operation's counter."""
        ring = self.cfg.ring
        ident = spec.get(f"{name}_id")
        if ident is None:
            return [self._elems(c, f"t{name}/{c}", ctr, n) & ring.mask for c in range(3)]
        if not isinstance(ident, str) or not 0 < len(ident) <= 200:
            raise Refused("bad-request", "operand name")
        if ident.startswith("act/"):
            return self._act_operand(name, ident, spec.get("a_seg"), n)
        return [self._elems(c, f"t{name.upper()}/{ident}/{c}", 0, n) & ring.mask for c in range(3)]

    def _act_comps(self, op: int, sub: int, leader: int, n: int) -> list:
        """The three components of one job's segment of an activation mask A: derived from
        the device operation that produced the activation, the job's slot and its leader.
        In ``cmd_eval`` the leader is not taken from the host but inferred from this device's
        own index and role (evaluator: d-1, leader: d), so only the two LTEEs that
        legitimately evaluate a job ever compute y - A for that job's A."""
        return [self._elems(c, f"tA/act/{op}/{sub}/{leader}/{c}", 0, n) & self.cfg.ring.mask for c in range(3)]

    def _act_operand(self, name: str, ident: str, segs, n: int) -> list:
        """A named operand "act/<op>": the activation mask A of the device operation <op>,
        the concatenation of its jobs' segments [(slot, leader, elements), ...]."""
        try:
            op = int(ident[4:])
            segs = [(int(a), int(b), int(k)) for a, b, k in segs]
        except (TypeError, ValueError):
            raise Refused("bad-request", "activation operand") from None
        if (name != "a" or not 1 <= len(segs) <= SLOTS or sum(k for _, _, k in segs) != n
                or any(not 0 <= a < SLOTS or b not in (0, 1, 2) or k < 0 for a, b, k in segs)):
            raise Refused("bad-request", "activation operand segments")
        parts = [self._act_comps(op, a, b, k) for a, b, k in segs]
        return [np.concatenate([p[c] for p in parts]) for c in range(3)]

    def cmd_operand(self, arrays):
        """The host's two components of a named triple operand (e.g. the b that masks a
        weight tensor, opened once as sigma = W - b). meta = [op, n_op, ctr, sub]."""
        self._need_ready()
        try:
            spec = json.loads(_blob(arrays[1]).decode())
            name, shape = str(spec["which"]), tuple(int(d) for d in spec["shape"])
        except (ValueError, KeyError, TypeError) as e:
            raise Refused("bad-request", f"operand spec: {e}") from None
        n = int(np.prod(shape))
        if name not in ("a", "b") or spec.get(f"{name}_id") is None or not 0 < n <= 1 << 27:
            raise Refused("bad-request", "operand request")
        comps = self._operand(name, spec, 0, n)
        d = self.index
        if spec.get("full"):
            # the whole A of an input mask goes only to the input owner named in its id
            # ("in<owner>/..."): it then opens rho = X - A itself [docs: stamp.md]
            if name != "a" or not str(spec["a_id"]).startswith(f"in{d}/"):
                raise Refused("policy", "only the input owner's device releases a whole input mask")
            return [comps[d], comps[(d + 1) % 3], self.cfg.ring.reduce(sum(comps))]
        if str(spec.get(f"{name}_id")).startswith("in") and name == "b":
            raise Refused("bad-request", "input masks are a-operands")
        return [comps[d], comps[(d + 1) % 3]]

    def cmd_triple(self, arrays):
        """A replicated multiplication triple (A, B, C = f(A, B)) for the malicious check of
        a linear layer [STAMP Protocol 5 step 1 / ABY3 5.3]; meta = [op, n_op, ctr, sub].
        Spec: kind, attrs, shapes x, w, c; optional a_id / b_id (named operands, see
        ``_operand``) and a_known / b_known (the host already holds that operand's
        components: they are not sent again). C is always fresh (counter)."""
        self._need_ready()
        kernels = _kernels()
        meta = arrays[0]
        try:
            spec = json.loads(_blob(arrays[1]).decode())
            xs, ws, cs = (tuple(int(d) for d in spec[k]) for k in ("x", "w", "c"))
            f = kernels.bilinear(str(spec["kind"]), dict(spec.get("attrs", {})), self.cfg.ring)
        except (ValueError, KeyError, TypeError, ProtocolError) as e:
            raise Refused("bad-request", f"triple spec: {e}") from None
        sizes = [int(np.prod(s)) for s in (xs, ws, cs)]
        if max(sizes) > int(meta[1]) // SLOTS:
            raise Refused("bad-request", "triple larger than the operation slot")
        ctr = self._begin(meta, "triple", ("s", 0))
        ring = self.cfg.ring
        d = self.index
        comps = {"a": self._operand("a", spec, ctr, sizes[0]), "b": self._operand("b", spec, ctr, sizes[1])}
        a = ring.reduce(sum(comps["a"])).reshape(xs)
        b = ring.reduce(sum(comps["b"])).reshape(ws)
        c = f(a, b).reshape(-1)
        if c.size != sizes[2]:
            raise Refused("bad-request", "triple output shape")
        self.cnt.int_ops += 2 * int(np.prod(cs)) * max(1, sizes[0] // max(1, xs[0]) if len(xs) else 1)
        cc = [self._zero_comp(k, "tc", ctr, sizes[2], self.cfg.ring_bits) for k in range(3)]
        cc[0] = ring.add(cc[0], c)
        nx = (d + 1) % 3
        empty = np.zeros(0, dtype=np.uint64)
        out = []
        for name in ("a", "b"):
            known = bool(spec.get(f"{name}_known"))
            out += [empty, empty] if known else [comps[name][d], comps[name][nx]]
        return out + [cc[d], cc[nx]]

    def cmd_batch(self, arrays):
        """Several seed requests of one operation in one bus transaction (``BATCHABLE``: they
        need no peer's message). arrays[0] = int64 command indices, then one meta array per
        request; each is served exactly as alone and in order (its counter and policy checks),
        the first refusal refuses the transaction. Returns int64 [results per request], then
        every request's results in order."""
        codes = arrays[0]
        if codes.dtype != np.int64 or codes.ndim != 1 or len(arrays) != 1 + codes.size or codes.size > 3 * SLOTS:
            raise Refused("bad-request", "batch layout")
        return self._serve_many(codes, arrays[1:])

    def cmd_prefetch(self, arrays):
        """Seed requests of *future* operations, served before they run (the offline phase:
        they depend on no query). The layout of ``cmd_batch``; each request is served exactly
        as alone (its policy checks) under ``_reserve``'s counter discipline: operations in
        increasing order, each ahead of every operation begun, its counter range fixed now
        and above the device's, each kind once per slot. At most ``PREFETCH_MAX`` requests."""
        codes = arrays[0]
        if codes.dtype != np.int64 or codes.ndim != 1 or len(arrays) != 1 + codes.size or codes.size > PREFETCH_MAX:
            raise Refused("bad-request", "prefetch layout")
        self._prefetching = True
        try:
            return self._serve_many(codes, arrays[1:])
        finally:
            self._prefetching = False

    def _serve_many(self, codes: np.ndarray, metas: list) -> list:
        counts, out = [], []
        for code, meta in zip(codes.tolist(), metas):
            if not 0 <= code < len(BATCHABLE):
                raise Refused("bad-request", "command not batchable")
            res = getattr(self, "cmd_" + BATCHABLE[code])([meta])
            counts.append(len(res))
            out += res
        return [np.array(counts, dtype=np.int64)] + out

    def cmd_ready(self, arrays):
        """Returns once the device's start-up work (the plaintext kernels' import, ``main``)
        is finished. The host asks before its online phase, so that work (~70 ms, longer on a
        busy machine) neither delays the first online request nor competes with it for the
        interpreter lock; it reveals nothing and changes no counter (after Protocol 1 it also
        makes ``_seed``'s AES key schedules and the fixed labels' prefixes, which the first
        online request would otherwise make). Optional arrays[0] =
        int64 [busy-poll budget in us] for the waits after an online request (``main``)."""
        if arrays:
            b = arrays[0]
            if (len(arrays) != 1 or not isinstance(b, np.ndarray) or b.dtype != np.int64 or b.shape != (1,)
                    or not 0 <= int(b[0]) <= MAX_BUS_SPIN_US):
                raise Refused("bad-request", "ready: the busy-poll budget")
            self.spin_s = int(b[0]) * 1e-6
        t = self.preload
        if t is not None:
            t.join()
            self.preload = None
        _kernels()
        if len(self._prf) == 3:   # ``_seed``'s key schedules and the fixed labels' prefixes, made now
            for j in range(3):
                self._ecb_of(j)
            for label in _LABELS:
                self._prefix_of(label)
        return []

    def cmd_specs(self, arrays):
        """Operation specs the host will send with its online requests, parsed and validated
        now (before the online phase; ``_parse_spec``'s cache): an online request carrying the
        same bytes skips the parse. Each is checked as a request's spec is (a malformed one
        refuses the transaction); it changes no counter and releases nothing."""
        if len(arrays) > SPEC_CACHE:
            raise Refused("bad-request", "too many specs")
        kernels = _kernels()
        for a in arrays:
            key = _blob(a)
            spec = _parse_spec(kernels, key, self.specs)
            if self.cfg is not None:
                self._warm(kernels, key, spec)
        return []

    def _warm(self, kernels, key: bytes, spec: dict) -> None:
        """Run the spec's chain once on zeros, on a throwaway operation count, and the
        unmasking's expansion on public dummy seeds: the first online evaluation then runs
        code this process has run before (cold, W3's first ``eval`` took ~2.7 ms of device
        work against ~0.6 ms for the next; docs: stamp.md, "Eighth pass"). Nothing here
        touches a key, a counter or what the device releases; a chain that does not run on
        zeros (a range guard's check, the softmax path) is simply not warmed. The spec's chain is
        parsed here, whatever its size (``_chain_of``: the online request reuses it)."""
        n_in = math.prod(spec["shape"]) + kernels.n_params(spec)
        try:
            chain = self._chain_of(kernels, key, spec)
            if n_in > 1 << 20:
                return
            ring = self.cfg.ring
            chain(ring.add(np.zeros(n_in, dtype=np.uint64), zero_component(_DUMMY_SEEDS, 0, n_in, ring.mask)), _OpCount())
        except (ProtocolError, FixedPointRangeError, ValueError, IndexError, KeyError, TypeError):
            pass

    def cmd_stats(self, arrays):
        return [np.array([self.cnt.int_ops, self.cnt.float_ops, self.cnt.exp_ops, self.aes_bytes,
                          int(self.busy * 1e9)], dtype=np.int64)]


PREFETCH_MAX = 64 * SLOTS   # seed requests one prefetch may carry
_LABELS = [f"{k}/{i}" for k in ("m", "ma", "mb", "in", "out", "pad", "fin") for i in range(3)] + ["mf"]
_DUMMY_SEEDS = {c: bytes(16) for c in range(3)}   # public: the warm-up's stand-in stream seeds

COMMANDS = {name[4:]: getattr(Device, name) for name in dir(Device) if name.startswith("cmd_")}


def start() -> Device:
    """A new device, its plaintext kernels' import started in a thread (``_kernels``; joined
    by ``cmd_ready``): the process emulation's ``main`` and the in-process one
    (``ltee_inproc``) both start their device here."""
    preload = threading.Thread(target=_preload_kernels, name="ltee-kernels-import", daemon=True)
    preload.start()
    dev = Device()
    dev.preload = preload
    return dev


def serve(dev: Device, cmd: str, arrays: list) -> tuple[str, list]:
    """One request on the device: its handler, a refusal as the "refused" answer (code|detail
    in a uint8 array), the busy time, and a one-limb ring's results narrowed to uint32. The
    one dispatch of both emulations (``main`` on the pipe, ``ltee_inproc`` in the host):
    returns (answer tag, result arrays)."""
    t0 = time.perf_counter()
    handler = COMMANDS.get(cmd)
    try:
        if handler is None:
            raise Refused("bad-request", f"unknown command {cmd!r}")
        res = (dev._bound and dev.run_bound(cmd, arrays)) or handler(dev, arrays)   # (``ltee_bound``)
        tag = "ok"
    except Refused as r:
        res, tag = [np.frombuffer(f"{r.code}|{r.detail}".encode(), dtype=np.uint8)], "refused"
    except (ValueError, IndexError, KeyError, TypeError, OverflowError, AttributeError, ArithmeticError,
            ProtocolError) as e:
        # a host's malformed command (wrong dtype, shape or count of arrays) is refused; it
        # never ends the device (issue #22 item 5)
        res, tag = [np.frombuffer(f"bad-request|{type(e).__name__}: {e}".encode()[:2000], dtype=np.uint8)], "refused"
    dev.busy += time.perf_counter() - t0
    if tag == "ok" and dev.cfg is not None and dev.cfg.ring_bits <= 32:
        res = [a.astype(np.uint32) if a.dtype == np.uint64 and
               not (cmd == "mask" and len(res) == 2) else a for a in res]
    return tag, res


def main() -> None:
    dev = start()
    bus = BusPipe(sys.stdin.fileno(), sys.stdout.fileno(), "ltee")
    seq = 0
    spin = 0.0
    while True:
        # busy-polls only for the request after an online one (the host marks them,
        # ``LteeLink.set_online``) that is not the last one announced (``spin_after``), at most
        # one budget per wait: never outside the online phase
        try:
            hdr, arrays = bus.recv(spin)
        except (EOFError, FrameError, OSError):
            return
        if hdr.tag == "shutdown":
            return
        spin = dev.spin_s if hdr.phase == "online" and dev.spin_after(hdr.tag) else 0.0
        tag, res = serve(dev, hdr.tag, arrays)
        if hdr.tag == "ready" and tag == "ok":
            gc.freeze()     # start-up's objects out of the collector's sight before the online phase
        try:
            bus.send(tag, res, seq)
        except OSError:     # the host closed the bus
            return
        seq += 1


def end() -> None:
    """The device process's end, once ``main`` returned (shutdown, or the host closed the
    bus): ``os._exit`` at once, without the interpreter's finalization. That teardown (the
    modules of numpy, cryptography and the kernels, their objects one by one) cost ~50-65 ms
    of CPU per device, measured (docs/protocols/stamp.md, "Twelfth pass"); a device whose host
    finished its online phase early (p2 at batch 1) spent it while the other parties'
    queries ran, on the same two cores. Nothing is lost: the bus is raw descriptors (every
    answer written with ``os.writev`` before the next read), stderr is discarded, no file is
    open for writing, and the keys go with the process's memory."""
    os._exit(0)


if __name__ == "__main__":
    main()
    end()
