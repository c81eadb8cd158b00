"""What the fork server does ahead of its parties' requests (issue #23 item 2): its imports
(``preload``), warm-ups that every forked party would otherwise repeat, and *spare*
processes forked while the run process still parses and checks its line.

Spares. A ``secinfer run`` process (``launcher_fork._fork_run``) asks for one party per
role only after its checks (``secinfer.api.prepare``) and its set-up (work folder, keys,
cluster file). Forking five processes from a ~40 MB server then took 40 ms or more of the
critical path on two cores (each child starts running, and competes with the server, while
the next one is forked). So once the server is ready it forks, for each run process, one
spare per role of the protocol at once: a process that holds nothing more than the server
(no model, no input, no key: the server never has any) and waits on a pipe. When the run
process asks for a party, the server writes the request into a spare's pipe instead of
forking, and the spare becomes that party exactly as a freshly forked child would
(``launcher_fork._child``: own session, log, environment, ``party_main``).

A spare that is not used ends with its run process: when the run process says ``exit``
or its socket closes (it failed a check, it was killed), the server kills its children,
the spares among them; if the server itself dies, each spare reads the end of its pipe
and exits. Nothing is forked ahead where forking is unsafe (``fork_unsafe``).
"""

from __future__ import annotations

import json
import os
import sys


def preload(protocol: str, protocol_module: str | None = None, transport: str | None = None,
            onnx: bool = True, between=None) -> dict:
    """Import what a party of ``protocol`` imports before it runs; returns {module: error}
    for the imports that failed (a party reports such an error itself, after the fork).
    ``onnx``: the model owner's ONNX importer too (it imports the model file itself).
    ``between``: called once what a launcher needs too is imported (numpy, the protocol,
    the launcher), before what only the parties need (the transport, the handshake's
    cryptography): a run process forked then imports its own modules meanwhile."""
    import importlib

    failed: dict[str, str] = {}

    def imp(name: str):
        try:
            return importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - recorded; the party meets it again and reports it
            failed[name] = f"{type(e).__name__}: {e}"
            return None

    for name in ("numpy", "secinfer.runtime.launcher", "secinfer.runtime.cluster", "secinfer.protocols.base",
                 "secinfer.net.shaping"):
        imp(name)
    registry = imp("secinfer.protocols.registry")
    spec = None
    if registry is not None:
        try:
            if protocol_module:
                registry.register_module(protocol, protocol_module)
            spec = registry.get(protocol)
        except Exception as e:  # noqa: BLE001 - as above
            failed[f"protocol {protocol}"] = f"{type(e).__name__}: {e}"
    # the OpenSSL backend (every party's handshake loads it on its first X25519 key: 0.05 s
    # of CPU in each child; the launcher's key generation too) and
    # argparse (the run line; the parties' parser) before the run process is forked: else
    # it and this server would each import them
    imp("cryptography.hazmat.backends.openssl.backend")
    imp("argparse")
    # what the run process imports too (it reads the model cache's .npz into a Graph, writes
    # the model owner's, generates the parties' X25519 keys and decrypts the cache entry
    # with AES-GCM): imported once here, not once by it and once more by this server after
    # the fork (measured: ~10-15 ms of CPU the run process spent on them)
    for name in ("secinfer.ir.graph", "secinfer.ir.shapes", "zipfile", "secinfer.runtime.party",
                 "cryptography.hazmat.primitives.asymmetric.x25519", "cryptography.hazmat.primitives.ciphers.aead"):
        imp(name)
    warm = warm_openssl()      # (the run process's key generation and cache decryption use them too)
    if warm:
        failed["warm-up"] = warm
    if between is not None:
        between()
    for name in ("secinfer.runtime.partylog", "secinfer.crypto.prg"):
        imp(name)
    cluster = sys.modules.get("secinfer.runtime.cluster")
    t = transport or getattr(cluster, "DEFAULT_TRANSPORT", "tcp")
    imp({"zmq": "secinfer.net.zmq_transport"}.get(t, "secinfer.net.tcp_transport"))
    imp("encodings.idna")      # (every party's first socket call with a host name: idna, stringprep, unicodedata)
    blas = sys.modules.get("secinfer.protocols.rep3.blas")
    if blas is not None and hasattr(blas, "keep_controller"):
        try:    # each party's one_blas_thread would otherwise walk every shared object (~5 ms CPU)
            blas.keep_controller()
        except Exception as e:  # noqa: BLE001 - then each party looks itself, as before
            failed["threadpoolctl"] = f"{type(e).__name__}: {e}"
    if onnx and spec is not None and spec.model_role in spec.roles:   # the model owner's ONNX importer
        imp("secinfer.ir.onnx_import")
        imp("secinfer.ir.passes")
        defs = imp("onnx.defs")
        if defs is not None:   # onnx builds its operator schemas on first use (shape inference): now
            try:
                defs.get_schema("Gemm")
            except Exception as e:  # noqa: BLE001
                failed["onnx.defs.get_schema"] = f"{type(e).__name__}: {e}"
    return failed


def warm_openssl() -> str | None:
    """Use once, on constant inputs, what every party's handshake and records use
    (X25519, HKDF-SHA256, AES-GCM, AES-CTR of the PRG): OpenSSL looks up each algorithm on
    its first use, ~4 ms of CPU that every forked party paid again (measured: a forked
    child's handshake-like operations and argument parsing took 7.3-7.8 ms of CPU cold,
    3.1-3.6 ms after this and ``warm_party_parser``). Nothing here draws randomness (no key
    is generated: each party first uses the random generator after its fork) and nothing is
    kept. None, or why it failed (each party then warms up by itself, as before)."""
    try:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        from cryptography.hazmat.primitives.kdf.hkdf import HKDF

        key = X25519PrivateKey.from_private_bytes(bytes(range(1, 33)))
        shared = key.exchange(X25519PublicKey.from_public_bytes(key.public_key().public_bytes_raw()))
        okm = HKDF(algorithm=hashes.SHA256(), length=64, salt=b"warm-up", info=b"warm-up").derive(shared)
        aead = AESGCM(okm[:32])
        aead.decrypt(bytes(12), aead.encrypt(bytes(12), b"warm-up", b""), b"")
        Cipher(algorithms.AES(okm[32:48]), modes.CTR(bytes(16))).encryptor().update(bytes(64))
    except Exception as e:  # noqa: BLE001 - a warm-up only
        return f"{type(e).__name__}: {e}"
    return None


def warm_party_parser(parser) -> None:
    """Parse a typical party line once: argparse compiles its option patterns (``re``) on
    first use, and the cache is inherited by every party forked afterwards."""
    try:
        parser.parse_args(["--cluster", "cluster.toml", "--id", "p", "--protocol", "p", "--security", "s",
                           "--network", "none", "--options-json", "{}", "--session", "00", "--result", "r.json",
                           "--log-dir", ".", "--range-checked", "--die-with-parent", "1"])
    except (SystemExit, Exception):  # noqa: BLE001 - a warm-up only
        pass


class Spares:
    """The server's spares: {owner: [(pid, write end of its pipe)]}, owner being the
    fileno of the run process's control socket (as in the server's ``children``)."""

    def __init__(self):
        self.waiting: dict[int, list[tuple[int, int]]] = {}

    def fds(self) -> list[int]:
        """Every pipe end the server holds (closed in every process it forks)."""
        return [w for items in self.waiting.values() for _, w in items]

    def count(self, owner: int) -> int:
        return len(self.waiting.get(owner, ()))

    def fork(self, n: int, owner: int, close_fds: list[int], become) -> list[int]:
        """Fork ``n`` spares for ``owner``; their pids (fewer if a fork failed). ``become``:
        the server's ``_child(request, close_fds)``, run in a spare once its request came."""
        pids = []
        for _ in range(n):
            try:
                r, w = os.pipe()
            except OSError:
                break
            try:
                pid = os.fork()
            except OSError:
                os.close(r), os.close(w)
                break
            if pid == 0:
                os.close(w)
                _wait(r, close_fds + self.fds(), become)   # never returns
            os.close(r)
            self.waiting.setdefault(owner, []).append((pid, w))
            pids.append(pid)
        return pids

    def take(self, owner: int, request: dict) -> int | None:
        """Hand ``request`` (a ``fork`` message) to one of ``owner``'s spares; its pid, or
        None if it has none left (or none took it: the caller forks as before)."""
        line = json.dumps(request).encode() + b"\n"
        items = self.waiting.get(owner) or []
        while items:
            pid, w = items.pop(0)
            try:
                view = memoryview(line)
                while view:
                    view = view[os.write(w, view):]
                return pid
            except OSError:          # (it died meanwhile: reaped by the server's loop)
                continue
            finally:
                os.close(w)
        return None

    def forget(self, pid: int) -> None:
        """A spare that ended (reaped) before it was used."""
        for items in self.waiting.values():
            for item in list(items):
                if item[0] == pid:
                    items.remove(item)
                    os.close(item[1])

    def drop(self, owner: int) -> None:
        """Close ``owner``'s pipes (its spares then exit)."""
        for _, w in self.waiting.pop(owner, []):
            try:
                os.close(w)
            except OSError:
                pass


def _wait(r: int, close_fds: list[int], become) -> None:
    """In a spare: wait for the request, then become the party; never returns. The end of
    the pipe (the server closed it, or died) ends it quietly."""
    from secinfer.runtime.fork_child import close_all, exit_child

    code = 0
    try:
        close_all(close_fds)
        buf = b""
        while not buf.endswith(b"\n"):
            data = os.read(r, 65536)
            if not data:
                break
            buf += data
        os.close(r)
        if buf.endswith(b"\n"):
            become(json.loads(buf), [])  # never returns
    except BaseException:  # noqa: BLE001 - a spare that cannot become a party: its launcher sees it exit
        code = 2
    exit_child(code)
