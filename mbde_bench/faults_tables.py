"""Tables of ``mbde bench faults`` (markdown): per scenario, estimator and fault, and the summary
with the target misses (:data:`TARGETS`)."""
from __future__ import annotations

import math
import time

from mbde_core.replay.runner import suitability

TARGETS = {"outliers": ("ratio_steady", 1.5), "backward_jump": ("recovery_s", 1.0), "bag_loop": ("recovery_s", 1.0),
           "gap": ("recovery_s", 1.0)}


def crash_count(r) -> int:
    """Exceptions, non-finite estimates and bad NEES values of a run (its crashes)."""
    return int(r.get("raised", 0) or 0) + int(r.get("non_finite_estimates", 0) or 0) + int(r.get("bad_nees", 0) or 0)


def target_misses(rows) -> list:
    out = []
    for r in rows:
        key, limit = TARGETS.get(r["fault"], (None, None))
        if key is not None and not (r.get(key, math.inf) <= limit):
            out.append(r)
    return out


def _cell(r) -> str:
    if r is None:
        return "-"
    if r.get("rmse") is None:
        return "crash"
    text = _ratio_text(r)
    if "recovery_s" in r:
        rec = r["recovery_s"]
        text += f"/{rec:.2f}s" if math.isfinite(rec) else "/never"
    key, limit = TARGETS.get(r["fault"], (None, None))
    if key is not None and not (r.get(key, math.inf) <= limit):
        text += "!"
    if crash_count(r):
        text += f" C{crash_count(r)}"
    return text


def _ratio_text(r) -> str:
    """The whole-run ratio; for a fault whose target is the steady-state ratio, that one
    first and the whole-run ratio in parentheses."""
    whole = r.get("ratio", math.nan)
    whole = f"{whole:.2f}" if math.isfinite(whole) else "nan"
    if TARGETS.get(r["fault"], (None,))[0] != "ratio_steady":
        return whole
    steady = r.get("ratio_steady", math.nan)
    return (f"{steady:.2f}" if math.isfinite(steady) else "nan") + f" ({whole})"


def format_tables(rows, scenarios, names, faults) -> str:
    """Per scenario: RMSE ratio to clean (/recovery time) per fault and estimator, then the
    counters of the stage summed over the estimators."""
    by = {(r["scenario"], r["estimator"], r["fault"]): r for r in rows}
    lines = []
    w = max(len(f) for f in faults) + 2
    for s in scenarios:
        lines.append(f"\n{s}: RMSE(z) / clean RMSE [/ recovery time]; ! = misses its target, C = crashes")
        lines.append(f"{'fault':<{w}}" + "".join(f"{n:>16}" for n in names))
        for f in faults:
            lines.append(f"{f:<{w}}" + "".join(f"{_cell(by.get((s, n, f))):>16}" for n in names))
        clean = [by.get((s, n, "clean")) for n in names]
        lines.append(f"{'clean RMSE [rad]':<{w}}" + "".join(
            f"{(c['rmse'] if c and c.get('rmse') is not None else math.nan):>16.4f}" for c in clean))
    return "\n".join(lines)


def _worst(rs, key, default=math.nan):
    vals = [r.get(key) for r in rs if r.get(key) is not None]
    vals = [v for v in vals if not (isinstance(v, float) and math.isnan(v))]
    return max(vals) if vals else default


def format_summary(rows, names, faults) -> str:
    """Markdown table over every scenario: per fault and estimator the worst RMSE ratio to
    clean, the worst recovery time [s] and the worst RMSE-after-recovery ratio (faults
    that end), crashes; then the clean runs' false-rejection rate of the gate."""
    by = {}
    for r in rows:
        by.setdefault((r["fault"], r["estimator"]), []).append(r)
    scen = len({r["scenario"] for r in rows})
    lines = [f"\nAll {scen} scenario(s), worst case: RMSE / clean [/ recovery s, RMSE after recovery / clean]; "
             "! misses a target, C crashes", "", "| fault | " + " | ".join(names) + " |",
             "|---|" + "---|" * len(names)]
    for f in faults:
        cells = []
        for n in names:
            rs = by.get((f, n), [])
            if not rs:
                cells.append("-")
                continue
            text = f"{_worst(rs, 'ratio'):.2f}"
            if TARGETS.get(f, (None,))[0] == "ratio_steady":
                text = f"{_worst(rs, 'ratio_steady'):.2f} ({text})"
            if any("recovery_s" in r for r in rs):
                rec = _worst(rs, "recovery_s", math.inf)
                after = [r["rmse_after"] / r["clean_rmse_after"] for r in rs
                         if r.get("rmse_after") is not None and r.get("clean_rmse_after")]
                text += f" / {rec:.2f} s" if math.isfinite(rec) else " / never"
                if after:
                    text += f", {max(after):.2f}"
            if any(r in target_misses(rs) for r in rs):
                text += " !"
            crashes = sum(crash_count(r) for r in rs)
            if crashes:
                text += f" C{crashes}"
            cells.append(text)
        lines.append(f"| {f} | " + " | ".join(cells) + " |")
    rates, steady, cost = [], [], []
    for n in names:
        rs = by.get(("clean", n), [])
        rec = sum(int(r.get("received", 0) or 0) for r in rs)
        rej = sum(int(r.get("rejected_gate", 0) or 0) for r in rs)
        rates.append(f"{100.0 * max(rej_rate(r) for r in rs):.2f} % max, {100.0 * rej / rec:.2f} % all" if rec else "-")
        steady.append(_steady_rates(rs))
        ratios = [r["rmse"] / r["ungated_rmse"] for r in rs if r.get("rmse") is not None and r.get("ungated_rmse")]
        cost.append(f"{max(ratios):.2f}" if ratios else "-")
    lines.append("| clean: gate rejections | " + " | ".join(rates) + " |")
    lines.append("| clean, t >= 1 s: gate rejections, suitable runs (weak runs) | " + " | ".join(steady) + " |")
    lines.append("| clean: RMSE / ungated RMSE | " + " | ".join(cost) + " |")
    return "\n".join(lines)


def _steady_rates(rs) -> str:
    """False-rejection rate after the first second over the runs whose suitability is ok
    (the largest of a run, and all their readings pooled), then the largest of the weak
    ones (where the estimator cannot follow the state)."""
    def rate(r):
        n = int(r.get("gated_steady", 0) or 0)
        return int(r.get("rejected_steady", 0) or 0) / n if n else 0.0

    ok = [r for r in rs if r.get("suitability") == "ok"]
    weak = [rate(r) for r in rs if r.get("suitability", "ok") != "ok"]
    n = sum(int(r.get("gated_steady", 0) or 0) for r in ok)
    pooled = sum(int(r.get("rejected_steady", 0) or 0) for r in ok) / n if n else 0.0
    text = f"{100.0 * max(map(rate, ok)):.2f} % max, {100.0 * pooled:.3f} % all" if ok else "-"
    return text + (f" ({100.0 * max(weak):.2f} %)" if weak else "")


def rej_rate(r) -> float:
    """Fraction of a run's readings rejected by the gate."""
    rec = int(r.get("received", 0) or 0)
    return int(r.get("rejected_gate", 0) or 0) / rec if rec else 0.0
