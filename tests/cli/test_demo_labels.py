"""`secinfer demo` compares like with like: a protocol that reveals only the class (ASTRA on
a classifier ending in a sigmoid [ASTRA 5.5]) is compared with the reference's class, a
protocol that reveals the scores with the reference's scores."""

from secinfer.cli.demo import evaluate_pair
from secinfer.protocols import registry


def test_label_reveal_is_compared_with_the_reference_labels():
    r = evaluate_pair(registry.get("astra"), "cancer-logreg", 12, "none", "semi-honest")
    assert "labels" in r["reference"]
    assert r["bit_exact"] and r["max_abs_err_vs_fixed"] == 0.0 and r["prediction_agreement"] == 1.0


def test_score_reveal_is_compared_with_the_reference_scores():
    r = evaluate_pair(registry.get("astra"), "cancer-linsvc", 12, "none", "semi-honest")
    assert r["reference"] == "fixed-point ref"
    assert 0.0 < r["max_abs_err_vs_fixed"] < 0.1      # scores: a small fixed-point difference
