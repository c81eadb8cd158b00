"""What the CLI tests share: the CLI in a subprocess."""

import subprocess
import sys


def run_cli(*args, timeout=180):
    """``python -m secinfer *args``: (return code, stdout, stderr)."""
    p = subprocess.run([sys.executable, "-m", "secinfer", *args], capture_output=True, text=True,
                       timeout=timeout)
    return p.returncode, p.stdout, p.stderr
