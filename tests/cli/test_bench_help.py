"""`secinfer bench --help` names every suite the bench runs (the list is written out in the
CLI, which does not import the bench at start-up)."""

import re
import subprocess
import sys

from secinfer.bench.suites import SUITES


def test_bench_help_names_every_suite():
    out = subprocess.run([sys.executable, "-m", "secinfer.cli.main", "bench", "--help"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    listed = set(re.findall(r"[a-z][a-z-]*", text.split("positional arguments:")[1].split("(`")[0]))
    assert set(SUITES) <= listed, set(SUITES) - listed
