#!/usr/bin/env python3
"""Give every bracketed paper citation in comments and docstrings its paper's prefix.

``# [Fig. 3]`` in five papers' code is five different figures; ``# [ASTRA Fig. 3]`` is one.
This rewrites, in the comments and string literals of ``.py`` files (``src/`` and
``tests/`` by default):

* ``[Fig. 3]``, ``[Alg. 1-2, Fig. 1]``, ``[Protocol 5 step 5]``, ``[5.3]``, ``[III-B]`` ...
  -> ``[ASTRA Fig. 3]`` ... with the paper of the file, inferred from its package (see
  ``PACKAGES``) or, failing that, from a module docstring that names exactly one paper;
* ``ASTRA [5.3]`` (the paper named just before the bracket) -> ``[ASTRA 5.3]``.

A tag counts as a citation when it opens with a citation word (Fig., Alg., Protocol,
Table, Sec., Lemma, Eq., Claim, Appendix, ...) or a section number with a dot or a
roman part (``5.3``, ``4.2-4.5``, ``III-B``; not ``0.5`` or an interval ``[1.5, 2)``), and the bracket does not follow a name
(``a[Fig]`` is an index). A tag whose first word already names a paper (``[ASTRA 5.4]``,
``[Falcon Alg. 1]``, ``[ABY3 5.3]``) is left alone, so the script is idempotent. Where the
paper cannot be decided the script changes nothing and prints the place. A file with the
marker ``tag_prefix: skip`` in it (this script's test samples) is not read.

    python scripts/tag_prefix.py [PATH ...]            rewrite in place, list what changed
    python scripts/tag_prefix.py --check [PATH ...]    change nothing; exit 1 if an
                                                       unprefixed tag is left
"""

from __future__ import annotations

import argparse
import io
import re
import sys
import tokenize
from pathlib import Path

SKIP = "tag_prefix: " + "skip"  # a file holding this marker is left alone (sample tags)
# CRISP-certified: the certified-data fragment of the CRISP system paper (protocols/certified)
PAPERS = ("ASTRA", "STAMP", "CRISP-certified", "CRISP", "SAFHIRE")

# path fragment (posix, relative to the repository) -> paper; the first match wins
PACKAGES = (
    ("protocols/astra/", "ASTRA"), ("protocols/aby3/", "ASTRA"), ("sharing/astra.py", "ASTRA"),
    ("protocols/stamp/", "STAMP"), ("protocols/falcon/", "STAMP"),
    ("crypto/zk/zkbpp.py", "CRISP-certified"), ("crypto/zk/bdop.py", "CRISP-certified"),
    ("tests/zk/test_zkbpp", "CRISP-certified"), ("tests/zk/test_bdop", "CRISP-certified"),
    ("protocols/crisp/", "CRISP"), ("crypto/zk/", "CRISP"), ("crypto/fss/", "CRISP"),
    ("protocols/safhire/", "SAFHIRE"), ("protocols/certified/", "CRISP-certified"),
    ("tests/astra/", "ASTRA"), ("tests/stamp/", "STAMP"), ("tests/crisp/", "CRISP"),
    ("tests/zk/", "CRISP"), ("tests/fss/", "CRISP"), ("tests/safhire/", "SAFHIRE"),
    ("tests/certified/", "CRISP-certified"),
)

CITE_WORDS = (r"Fig\.?|Figure|Figs\.?|Alg\.?|Algorithm|Protocol|Table|Tab\.|Sec\.?|Section|§|Lemma|"
              r"Thm\.?|Theorem|Def\.?|Definition|Eq\.?|Eqs\.?|Equation|Appendix|App\.|Claim|Corollary|"
              r"Remark|Construction|Functionality|Step")
# a section number (never 0.x, and not a half-open interval such as [1.5, 2) of a comment)
SECTION = r"(?!\d+(?:\.\d+)?\s*,\s*-?\d+(?:\.\d+)?\s*\))(?:[1-9]\d*\.\d+|[IVX]+-[A-Z]|[IVX]+\.[A-Z0-9])"
# "[" not after a name, ")" or "]" (an index), then a citation word or a section number
TAG = re.compile(rf"(?<![\w\])])\[(?=(?:{CITE_WORDS})(?![\w])|(?:{SECTION})(?![\w]))")
# "ASTRA [5.3" -> "[ASTRA 5.3"
NAMED = re.compile(rf"\b({'|'.join(map(re.escape, PAPERS))}) \[(?=(?:{CITE_WORDS})(?![\w])|(?:{SECTION})(?![\w]))")


def paper_of(path: Path, source: str) -> str | None:
    posix = path.as_posix()
    for frag, paper in PACKAGES:
        if frag in posix:
            return paper
    doc = _module_docstring(source)
    named = {p for p in PAPERS if re.search(rf"\b{re.escape(p)}\b(?!-certified)", doc)}
    return named.pop() if len(named) == 1 else None


def _module_docstring(source: str) -> str:
    try:
        toks = tokenize.generate_tokens(io.StringIO(source).readline)
        for tok in toks:
            if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.ENCODING):
                continue
            return tok.string if tok.type == tokenize.STRING else ""
    except (tokenize.TokenError, SyntaxError):
        return ""
    return ""


def _spans(source: str) -> list[tuple[int, int]]:
    """Character spans of the comments and string literals of ``source``."""
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in (tokenize.COMMENT, tokenize.STRING):
            (r0, c0), (r1, c1) = tok.start, tok.end
            out.append((starts[r0 - 1] + c0, starts[r1 - 1] + c1))
    return out


def rewrite(path: Path, source: str) -> tuple[str, list[str], list[str]]:
    """(new source, changes made, places left undecided), one line of text per tag."""
    paper = paper_of(path, source)
    changes: list[str] = []
    undecided: list[str] = []
    pieces = []
    last = 0

    def where(pos: int) -> str:
        line = source.count("\n", 0, pos) + 1
        text = source[pos:source.find("\n", pos) if "\n" in source[pos:] else len(source)]
        return f"{path}:{line}: {text[:60]}"

    for a, b in _spans(source):
        text = source[a:b]
        for m in NAMED.finditer(text):
            changes.append(f"{where(a + m.start())} -> [{m.group(1)} ...]")
        text2 = NAMED.sub(lambda m: f"[{m.group(1)} ", text)
        for m in TAG.finditer(text2):
            # positions in text2 are those of text up to the few characters NAMED moved
            pos = a + min(m.start(), len(text) - 1)
            (undecided if paper is None else changes).append(where(pos) + ("" if paper is None else f" -> {paper}"))
        if paper is not None:
            text2 = TAG.sub(f"[{paper} ", text2)
        if text2 != text:
            pieces += [source[last:a], text2]
            last = b
    pieces.append(source[last:])
    return "".join(pieces), changes, undecided


def files(paths: list[str]) -> list[Path]:
    out = []
    for p in map(Path, paths):
        out += sorted(p.rglob("*.py")) if p.is_dir() else [p]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", default=["src", "tests"])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if an unprefixed tag is left")
    args = ap.parse_args(argv)
    left = 0
    for path in files(args.paths):
        source = path.read_text()
        if SKIP in source:
            continue
        try:
            new, changes, undecided = rewrite(path, source)
        except (tokenize.TokenError, SyntaxError, IndentationError) as e:
            print(f"{path}: not parsed ({e}); skipped", file=sys.stderr)
            continue
        for u in undecided:
            print(f"cannot decide the paper: {u}")
        left += len(undecided)
        if args.check:
            for c in changes:
                print(f"unprefixed: {c}")
            left += len(changes)
        elif new != source:
            path.write_text(new)
            for c in changes:
                print(f"prefixed: {c}")
    if args.check and left:
        print(f"{left} citation tag(s) without a paper prefix", file=sys.stderr)
        return 1
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
