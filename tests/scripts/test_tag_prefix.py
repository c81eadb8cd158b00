"""scripts/tag_prefix.py on a small sample tree: prefixes, leaves code and prefixed tags
alone, reports what it cannot decide, is idempotent, and --check fails while a tag is left.

tag_prefix: skip (this file holds sample tags of no paper)
"""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("tag_prefix", ROOT / "scripts" / "tag_prefix.py")
tag_prefix = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tag_prefix)

SAMPLE = {
    "src/secinfer/protocols/astra/engine.py": (
        '"""Pi_mult [Fig. 3] and the bucket check [Alg. 1-2, Fig. 1]."""\n'
        "x = table[Fig]  # index, not a tag; keep [ASTRA 5.4] and [Falcon Alg. 1]\n"
        "y = 1  # [5.3], [III-B, Fig. 3]; the interval [0.5, 1) and [1.5, 2) stay\n"
        's = "see [Protocol 4 step 2]"\n',
        '"""Pi_mult [ASTRA Fig. 3] and the bucket check [ASTRA Alg. 1-2, Fig. 1]."""\n'
        "x = table[Fig]  # index, not a tag; keep [ASTRA 5.4] and [Falcon Alg. 1]\n"
        "y = 1  # [ASTRA 5.3], [ASTRA III-B, Fig. 3]; the interval [0.5, 1) and [1.5, 2) stay\n"
        's = "see [ASTRA Protocol 4 step 2]"\n'),
    "tests/stamp/test_x.py": (
        "# the fused step [Protocol 5 step 5]\n",
        "# the fused step [STAMP Protocol 5 step 5]\n"),
    "src/secinfer/crypto/he/rlwe.py": (
        '"""RLWE extraction and packing for SAFHIRE.\n\nSee [Sec. 4.4]."""\n',
        '"""RLWE extraction and packing for SAFHIRE.\n\nSee [SAFHIRE Sec. 4.4]."""\n'),
    "src/secinfer/arith/fixed.py": (
        "FX64 = 1  # ASTRA [5.3]: l = 64\n",
        "FX64 = 1  # [ASTRA 5.3]: l = 64\n"),
}
SAMPLE["src/secinfer/protocols/certified/protocol.py"] = (
    "NONCE = 16  # [Sec. 6.2]; keep [CRISP-certified Sec. 4.3]\n",
    "NONCE = 16  # [CRISP-certified Sec. 6.2]; keep [CRISP-certified Sec. 4.3]\n")
SAMPLE["src/secinfer/crypto/he/extra.py"] = (
    '"""Helpers of the CRISP-certified release."""\n# [Sec. 5.1]\n',
    '"""Helpers of the CRISP-certified release."""\n# [CRISP-certified Sec. 5.1]\n')
UNDECIDED = ("src/secinfer/sharing/shared.py", '"""Used by ASTRA and STAMP."""\n# [Table 7]\n')


def _tree(tmp_path, with_undecided):
    for rel, (before, _after) in SAMPLE.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(before)
    if with_undecided:
        p = tmp_path / UNDECIDED[0]
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(UNDECIDED[1])


def test_rewrites_sample_and_is_idempotent(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _tree(tmp_path, with_undecided=False)
    assert tag_prefix.main(["--check", "src", "tests"]) == 1
    assert "unprefixed: src/secinfer/protocols/astra/engine.py:1" in capsys.readouterr().out
    assert tag_prefix.main(["src", "tests"]) == 0
    for rel, (_before, after) in SAMPLE.items():
        assert (tmp_path / rel).read_text() == after, rel
    assert tag_prefix.main(["src", "tests"]) == 0           # idempotent: nothing left to change
    for rel, (_before, after) in SAMPLE.items():
        assert (tmp_path / rel).read_text() == after, rel
    capsys.readouterr()
    assert tag_prefix.main(["--check", "src", "tests"]) == 0
    assert capsys.readouterr().out == ""


def test_undecided_paper_is_reported_not_guessed(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _tree(tmp_path, with_undecided=True)
    assert tag_prefix.main(["src", "tests"]) == 1
    out = capsys.readouterr().out
    assert "cannot decide the paper: src/secinfer/sharing/shared.py:2" in out
    assert (tmp_path / UNDECIDED[0]).read_text() == UNDECIDED[1]    # unchanged
    assert tag_prefix.main(["--check", "src", "tests"]) == 1
