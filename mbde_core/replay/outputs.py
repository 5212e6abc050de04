"""Files written by ``mbde replay``: metrics.json, an estimates bag, report.md, PNG plots."""
from __future__ import annotations

import json
import math
import os

import numpy as np

from mbde_core.replay.encode import write_records_part
from mbde_core.replay.merge import merge_parts


def _clean(obj):
    """JSON-safe copy (NaN/inf -> null, numpy -> python)."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _clean(obj.tolist())
    if isinstance(obj, (np.floating, float)):
        f = float(obj)
        return f if math.isfinite(f) else None
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.bool_,)):
        return bool(obj)
    return obj


def write_metrics(path: str, source, results, reference: dict | None = None, notes=None) -> dict:
    """metrics.json of one bag: source (ReplaySource or ReplayInputs), results: per
    estimator objects with name, metrics, config; readings counts and skipped messages
    from the first result that has them (every estimator reads the same bag).
    reference: what RMSE/NEES compare with when it is not the bag's ground truth
    (``mbde replay --reference smoother``: :func:`mbde_core.replay.smoothing.smoother_reference`);
    notes: lines said at the start of the run (what the default noise rule widened)."""
    counts = getattr(source, "counts", None) or next((r.counts for r in results if getattr(r, "counts", None)), {})
    skipped = getattr(source, "skipped", None)
    if skipped is None:
        skipped = next((r.skipped for r in results if hasattr(r, "skipped")), {})
    truth = getattr(source, "has_truth", None)
    doc = {
        "bag": source.bag,
        "mechanism": source.mechanism.name,
        "independent_coordinates": source.mechanism.independent_names,
        "duration_s": source.duration,
        "ground_truth": bool(truth if truth is not None else source.truth is not None),
        "readings": counts,
        "skipped_messages": skipped,
        "units": coordinate_units(source.mechanism),
        "estimators": {r.name: {"metrics": r.metrics, "config": r.config} for r in results},
    }
    doc["reference"] = reference or ({"kind": "ground truth"} if doc["ground_truth"] else None)
    doc["notes"] = list(notes or [])
    doc = _clean(doc)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=2)
    return doc


def coordinate_units(mech) -> dict:
    """Units of z, zd, zdd per independent coordinate: rad... for angles, m... for lengths."""
    angular = [c in set(mech.rel_columns.tolist()) for c in mech.independent]
    base = ["rad" if a else "m" for a in angular]
    return {"z": base, "zd": [f"{u}/s" for u in base], "zdd": [f"{u}/s^2" for u in base]}


def write_estimates_bag(path: str, source, results, storage: str = "sqlite3", description: str | None = None) -> dict:
    """Estimates as a ROS 2 bag: /mbde/<estimator>/state, /joint_states (+ /particles), and
    to view them /tf, /tf_static and markers (:mod:`mbde_core.replay.viewables`).

    results: streamed runs (part file, :mod:`mbde_core.replay.worker`) or in-memory runs
    (records + particles, :class:`mbde_core.replay.runner.EstimatorRun`, encoded into a
    temporary part file first). The part files are merged in time order by
    :func:`mbde_core.replay.merge.merge_parts` (streams: memory does not grow with the
    bag). Returns {topic: messages written}.
    """
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        runs = []
        for r in results:
            if getattr(r, "part", None):
                runs.append((r.name, r.part))
            else:
                part = os.path.join(tmp, f"{r.name}.part")
                write_records_part(part, r.name, r.records, r.particles, source.mechanism)
                runs.append((r.name, part))
        return merge_parts(path, source, runs, storage, description)


def write_report(path: str, doc: dict, plots: list[str], title: str = "mbde replay report") -> None:
    lines = [f"# {title}", "", f"- bag: `{doc['bag']}`", f"- mechanism: {doc['mechanism']} "
             f"(z = {', '.join(doc['independent_coordinates'])})", f"- duration: {doc['duration_s']:.3f} s",
             f"- ground truth: {'yes' if doc['ground_truth'] else 'no' if doc.get('reference') else 'no (accuracy metrics omitted)'}",
             "- readings: " + ", ".join(f"{k}: {v}" for k, v in doc["readings"].items())]
    if doc["skipped_messages"]:
        lines.append("- skipped messages: " + ", ".join(f"{k}: {v}" for k, v in doc["skipped_messages"].items()))
    lines += [f"- note: {n}" for n in doc.get("notes") or []]
    ref = doc.get("reference") or {}
    if ref.get("kind") == "smoother":
        lines.append("- reference of RMSE and NEES: **the batch smoother** of the same readings (`mbde replay "
                     "--reference smoother`), not ground truth; NEES uses P - P_smoother. " + reference_note(ref))
    lines += ["", "## Summary", "", summary_table(doc, markdown=True), ""]
    lines += ["'acquired [s]': the time from which the error of every coordinate stays within 5 sigma of the "
              "estimate's own covariance (or 0.5 deg for angles, 0.5 % of the largest body for lengths, whichever "
              "is larger; never beyond 10 deg or 5 %) and the true assembly branch keeps P > 0.99 to the end, from the "
              "first step at which the estimate's own 2 sigma is within those caps; 'branch [s]': the time after "
              "which the true assembly branch keeps "
              "P > 0.99. RMSE, NEES and cover95 are the tracking figures, from the acquisition to the end (the "
              "whole run's, start-up included, are in metrics.json; its RMSE of z in the 'whole-run' column). "
              "NEES/NIS: mean and the 95 % chi-square band of the mean for the run's effective sample size "
              "(steps / integrated autocorrelation time: successive steps are correlated); `(!)` marks a value "
              "above its band, overconfident (errors larger than the estimate's covariance says), `(u)` one "
              "below it, underconfident (bands wider than needed). 'cover95': the fraction of steps whose error lies inside the estimate's "
              "95 % region (0.95 when consistent). `(lock)`: a locked offset, a nearly constant error with a "
              "mean NEES above 10 x its dof for at least 1 s. 'trust': the last verdict from the readings alone "
              "(OK, DEGRADED, LOST; the same as the live node's diagnostics) and the percentages of the run "
              "at each level; `(trust)` the longest stretch at the worst level and its reason. Step time per filter step; RTF = processing time "
              "/ data duration (< 1: faster than real time).", ""]
    for p in plots:
        lines += [f"![{os.path.basename(p)}]({os.path.basename(p)})", ""]
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")


def reference_note(ref: dict) -> str:
    """One sentence on a smoother reference: convergence, its own uncertainty and accuracy."""
    out = (f"Smoother: {ref.get('status')} after {ref.get('iterations')} iterations, mean sigma of z "
           + "/".join(format(v, ".3g") for v in ref.get("mean_sigma_z", [])))
    if ref.get("rmse_vs_ground_truth"):
        out += "; its RMSE of z against the bag's ground truth " + "/".join(format(v, ".3g") for v in ref["rmse_vs_ground_truth"]["z"])
    return out + "."


def summary_table(doc: dict, markdown: bool = False) -> str:
    """The metrics table printed by ``mbde replay`` and ``make demo``: units in every
    column; the headline is tracking (from the acquisition to the end: RMSE, NEES with
    ``(!)`` above its 95 % band, ``(u)`` below, 95 % coverage), then the whole run's RMSE of z and NIS;
    a line under the table for each locked offset; in markdown (report.md) one for each
    estimator the suitability verdict called weak before the run (e.g. a motion its
    readings cannot tell from its mirror, which the declared motor limit explains)."""
    units = doc.get("units") or {}
    unit = {k: _common(v) for k, v in units.items()}
    cols = ["acquired [s]", "branch [s]", f"RMSE z{_u(unit.get('z'))}", f"RMSE zd{_u(unit.get('zd'))}",
            f"RMSE zdd{_u(unit.get('zdd'))}", "NEES [band]", "cover95", "NIS [band]",
            f"whole-run RMSE z{_u(unit.get('z'))}", "trust [% OK/DEG/LOST]", "step [us]", "RTF", "fused", "rejected"]
    cols = ["estimator"] + cols
    rows, locks, trusts, weak = [], [], [], []
    for name, entry in doc["estimators"].items():
        m = entry["metrics"] or {}
        if (m.get("suitability") or {}).get("level") not in (None, "ok"):
            weak.append(m["suitability"]["message"])
        rm = m.get("rmse", {})
        conv = m.get("convergence", {})
        track = conv.get("tracking") or {}
        trm = track.get("rmse", {})
        c = m.get("counters", {})
        rej = sum(c.get(k, 0) for k in ("rejected_gate", "out_of_order", "non_finite", "unknown_sensor"))
        lock = conv.get("locked_offset")
        if lock:
            locks.append(f"{name}: locked offset of {_fmt_list(lock['offset_z'], units.get('z'), unit.get('z'))}"
                         f"{_u(unit.get('z'))} from {lock['from']:.2f} s for {lock['duration']:.2f} s "
                         f"(mean NEES {lock['mean_nees']:.3g})")
        trust = m.get("trust") or {}
        if trust.get("worst"):
            w = trust["worst"]
            trusts.append(f"{name}: {w['level']} from {w['from']:.2f} s for {w['duration']:.2f} s: {w['reason']}")
        rows.append([
            ((m.get("diagnostics") or {}).get("refine") or {}).get("label") or name,
            (_fmt(conv.get("acquired_after"), ".3f") if conv.get("acquired_after") is not None else "never") if conv else "-",
            _fmt(conv.get("branch_identified_after"), ".3f") if "branch_identified_after" in conv else "-",
            _fmt_list(trm.get("z"), units.get("z"), unit.get("z")), _fmt_list(trm.get("zd"), units.get("zd"), unit.get("zd")),
            _fmt_list(trm.get("zdd"), units.get("zdd"), unit.get("zdd")),
            _banded(track.get("nees")) + (" (lock)" if lock else ""),
            _fmt((track.get("nees") or {}).get("coverage_95"), ".2f"), _banded(m.get("nis")),
            _fmt_list(rm.get("z"), units.get("z"), unit.get("z")), _trust(trust),
            _fmt(m.get("step_time_us", {}).get("mean"), ".0f"),
            _fmt(m.get("realtime_factor"), ".3f"),
            str(c.get("fused", "-")), str(rej),
        ])
    over = any("(!)" in cell for r in rows for cell in r)
    under = any("(u)" in cell for r in rows for cell in r)
    notes = ((["(!) above its 95 % consistency band: overconfident (errors larger than its covariance says)"]
              if over else [])
             + (["(u) below its 95 % consistency band: underconfident (its bands wider than needed)"] if under else [])
             + [f"(lock) {x}" for x in locks]
             + [f"(trust) {x}" for x in trusts])
    if markdown:  # the verdict before the run (printed then by mbde replay) is in the report too
        notes += [f"(suitability) {x}" for x in weak]
        out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        out += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(out + ([""] + notes if notes else []))
    widths = [max([len(cols[i])] + [len(r[i]) for r in rows]) for i in range(len(cols))]
    line = lambda vals: "  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(vals, widths)))  # noqa: E731
    return "\n".join([line(cols)] + [line(r) for r in rows] + notes)


def _trust(trust: dict) -> str:
    """'OK 94/6/0': the last verdict and the percentages of time OK/DEGRADED/LOST."""
    if not trust:
        return "-"
    f = trust["fraction"]
    return f"{trust['final']['level']} " + "/".join(f"{100 * f[k]:.0f}" for k in ("OK", "DEGRADED", "LOST"))


def _common(units):
    """The unit shared by every coordinate, else None (then each value carries its own)."""
    return units[0] if units and all(u == units[0] for u in units) else None


def _u(unit):
    return f" [{unit}]" if unit else ""


def _banded(entry) -> str:
    """'1.02 [0.9, 1.1]', with '(!)' when the mean is above the band, '(u)' below."""
    if not entry or entry.get("mean") is None:
        return "-"
    band = entry.get("band_95")
    text = f"{entry['mean']:.3g}"
    if band and band[0] is not None:
        text += f" [{band[0]:.2f}, {band[1]:.2f}]"
        if not band[0] <= entry["mean"] <= band[1]:
            text += " (!)" if entry["mean"] > band[1] else " (u)"
    return text


def _fmt(v, spec=".3g"):
    return "-" if v is None else format(v, spec)


def _fmt_list(v, units=None, common=None):
    """'0.0123' or, with coordinates of several units, '0.0123 rad/0.004 m'."""
    if v is None:
        return "-"
    if units and not common:
        return "/".join(f"{x:.3g} {u}" for x, u in zip(v, units))
    return "/".join(format(x, ".3g") for x in v)
