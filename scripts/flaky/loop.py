"""Run one pytest target (a file, a test id, or a folder) N times and count the failures.

    python scripts/flaky/loop.py -n 20 tests/serve/test_pool.py [--out DIR] [-- PYTEST-ARGS]

Each run is a fresh `python -m pytest -q -x -p no:cacheprovider TARGET` process (no
pytest-repeat: the suite does not depend on it). The full output of every failing run is kept
in DIR (default /tmp/flaky-<target>), one file per run; a summary line per target is printed
at the end: `TARGET: F failed / N runs`. For load, start busy loops beside it yourself
(`nice -n 19 sh -c 'while :; do :; done' &`) and run this under `nice -n 10`.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path


def _slug(target: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", target)[-80:]


def loop(target: str, n: int, out: Path, extra: list[str], timeout: float) -> int:
    out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for i in range(n):
        cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", target, *extra]
        t0 = time.monotonic()
        try:
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
            rc, text = p.returncode, p.stdout.decode(errors="replace")
        except subprocess.TimeoutExpired as e:
            rc, text = -1, (e.stdout or b"").decode(errors="replace") + f"\n[loop] timed out after {timeout} s\n"
        dt = time.monotonic() - t0
        tail = text.strip().splitlines()[-1] if text.strip() else ""
        if rc != 0:
            failed += 1
            f = out / f"{_slug(target)}.run{i:03d}.log"
            f.write_text(text)
            print(f"[{i + 1}/{n}] FAIL rc={rc} {dt:.1f}s {tail}  -> {f}", flush=True)
        else:
            print(f"[{i + 1}/{n}] ok {dt:.1f}s {tail}", flush=True)
    print(f"{target}: {failed} failed / {n} runs", flush=True)
    return failed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("targets", nargs="+", help="pytest targets (files or test ids); each looped in turn")
    ap.add_argument("-n", type=int, default=10, help="runs per target")
    ap.add_argument("--out", type=Path, default=None, help="where failing runs' output is kept")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per run before it counts as failed")
    ap.add_argument("--pytest-arg", action="append", default=[], help="extra argument for pytest (repeatable)")
    a = ap.parse_args()
    total = {}
    for t in a.targets:
        out = a.out or Path(f"/tmp/flaky-{os.getpid()}")
        total[t] = loop(t, a.n, out, a.pytest_arg, a.timeout)
    print("summary:")
    for t, f in total.items():
        print(f"  {t}: {f} failed / {a.n} runs")
    return 1 if any(total.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
