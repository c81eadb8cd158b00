"""Is a quantized SAFHIRE model degenerate? [issue 18]

Post-training quantization rounds every weight to an integer against its round's
accumulator scale; weights worth less than half a unit become 0. Whole layers can vanish
(ResNet-20's residual branches at b = 8), and a model whose output no longer depends on
its input answers nothing, however fast the protocol runs it. The quantizer records, on
its calibration data, the fraction of each round's real weights that became 0, the blocks
(round, source) that became entirely 0, and how many distinct outputs the calibration
inputs gave; ``secinfer inspect`` and ``secinfer bench safhire`` print these warnings.
"""

from __future__ import annotations


def zero_weight_report(qm, nnz_float: list[list[int]]) -> dict:
    """How much of each round's real (float) map rounded to integer 0 [issue 18]: per
    round the fraction of non-zero real weights that became 0, and the (round, source)
    blocks that were non-zero and are now entirely 0 (a layer, or a residual branch, that
    the quantized model no longer computes)."""
    frac, blocks = [], []
    for r, (rd, nf) in enumerate(zip(qm.rounds, nnz_float)):
        ni = [int(w.nnz) for w in rd.weights]
        frac.append(round(1.0 - sum(ni) / sum(nf), 4) if sum(nf) else 0.0)
        blocks += [[r, int(c)] for c, f, i in zip(rd.sources, nf, ni) if f and not i]
    return {"zero_weight_frac": frac, "zero_blocks": blocks}


def degeneracy(qm) -> dict:
    """Whether the quantized model still computes something, from its calibration facts:
    ``degenerate`` when every calibration input gave the same output (the model answers
    nothing), with the all-zero blocks and the rounds that lost most of their weights.
    Models stored before this report existed give ``known: False``."""
    c = qm.calib or {}
    if "zero_blocks" not in c:
        return {"known": False, "degenerate": None}
    constant = c.get("distinct_outputs", 2) <= 1 < c.get("samples", 0)
    return {"known": True, "degenerate": bool(constant), "output_constant": bool(constant),
            "distinct_outputs": c.get("distinct_outputs"), "samples": c.get("samples"),
            "zero_blocks": c["zero_blocks"], "zero_weight_frac": c["zero_weight_frac"],
            "worst_round_zero_frac": max(c["zero_weight_frac"], default=0.0)}


def degeneracy_warnings(qm) -> list[str]:
    """Plain-language warnings for ``secinfer inspect`` and the bench (empty: none)."""
    d = degeneracy(qm)
    if not d["known"]:
        return ["quantized model stored without a zero-weight report: re-quantize to check it"]
    out = []
    if d["output_constant"]:
        out.append(f"DEGENERATE: the quantized model gives the same output for all {d['samples']} "
                   f"calibration inputs (it answers nothing)")
    if d["zero_blocks"]:
        out.append(f"{len(d['zero_blocks'])} weight block(s) quantize to all zeros (round, source): "
                   + ", ".join(f"({r}, {s})" for r, s in d["zero_blocks"]))
    return out
