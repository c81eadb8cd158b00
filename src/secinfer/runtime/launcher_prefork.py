"""What the fork server does ahead of its parties' requests (issue #23 item 2): warm-ups
that every forked party would otherwise repeat, and *spare* processes forked while the run
process still parses and checks its line.

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
    from secinfer.runtime.fork_child import exit_child

    code = 0
    try:
        for fd in close_fds:
            try:
                os.close(fd)
            except OSError:
                pass
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
