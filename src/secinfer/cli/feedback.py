"""What the CLI tells the user besides the answer: the model catalogue (``secinfer models``,
also as JSON) and the per-phase, per-party detail of a run (``secinfer run -v``)."""

from __future__ import annotations


def models_catalogue() -> dict:
    """Protocols (securities, trust, roles), zoo networks and bundled models, as plain data."""
    from secinfer.api import trust_of
    from secinfer.ir import bundled, zoo
    from secinfer.protocols import registry

    protocols = []
    for name in registry.names():
        try:
            s = registry.get(name)
        except Exception as e:  # noqa: BLE001 - a protocol whose dependencies are missing
            protocols.append({"name": name, "error": str(e)})
            continue
        protocols.append({"name": name, "description": s.description, "securities": list(s.securities),
                          "default_security": s.default_security, "default_fixed": s.default_fixed,
                          "roles": list(s.roles), "model_role": s.model_role, "input_role": s.input_role,
                          "insecure": bool(s.insecure), "trusted": trust_of(s)["trusted"],
                          "baseline_for": s.baseline_for or None, "paper": s.paper or None})
    nets = [{"name": m.name, "input_shape": list(m.input_shape), "params": int(m.params),
             "description": m.description} for m in zoo.list_models()]
    models = []
    for name in bundled.bundled_names():
        info = bundled.bundled_info(name)
        metric = info.get("metric", "")
        val = info.get("metrics", {}).get("float", {}).get(metric)
        models.append({"name": name, "task": info.get("task", ""), "estimator": info.get("estimator", ""),
                       "metric": metric, "metric_value": val if isinstance(val, float) else None})
    return {"protocols": protocols, "zoo": nets, "bundled": models}


def run_details(res) -> str:
    """Latency, traffic and rounds per phase, and traffic per party, of an ``api.Result``."""
    from secinfer.runtime.launcher import format_bytes

    d = res.details
    lat = d.get("latency_s", {})
    by_phase = d.get("bytes_by_phase", {})
    rounds = d.get("rounds", {})
    lines = ["per phase:"]
    for ph in ("setup", "offline", "online"):
        if ph in lat or ph in by_phase:
            lines.append(f"  {ph:<8} {float(lat.get(ph, 0.0)):9.3f} s  {format_bytes(int(by_phase.get(ph, 0))):>10}  "
                         f"{int(rounds.get(ph, 0))} rounds")
    per_party = d.get("bytes") or {}
    if isinstance(per_party, dict) and per_party:
        lines.append("per party (sent):")
        for role, b in per_party.items():
            pay = b.get("payload", 0) if isinstance(b, dict) else b
            lines.append(f"  {role:<12} {format_bytes(int(pay))}")
    return "\n".join(lines)
