"""Files written by ``mbde replay``: metrics.json, an estimates bag, report.md, PNG plots."""
from __future__ import annotations

import heapq
import json
import math
import os

import numpy as np

from mbde_core.rosio.bag import BagWriter
from mbde_core.replay.encode import read_part, write_records_part
from mbde_core.rosio.convert import STRING, string_msg
from mbde_core.rosio.factory import RosbagsFactory


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


def write_metrics(path: str, source, results, reference: dict | None = None) -> dict:
    """metrics.json of one bag: source (ReplaySource or ReplayInputs), results: per
    estimator objects with name, metrics, config; readings counts and skipped messages
    from the first result that has them (every estimator reads the same bag).
    reference: what RMSE/NEES compare with when it is not the bag's ground truth
    (``mbde replay --reference smoother``: :func:`mbde_core.replay.smoothing.smoother_reference`)."""
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
        "estimators": {r.name: {"metrics": r.metrics, "config": r.config} for r in results},
    }
    doc["reference"] = reference or ({"kind": "ground truth"} if doc["ground_truth"] else None)
    doc = _clean(doc)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=2)
    return doc


def write_estimates_bag(path: str, source, results, storage: str = "sqlite3", description: str | None = None) -> dict:
    """Estimates as a ROS 2 bag: /mbde/<estimator>/state, /joint_states (+ /particles).

    results: streamed runs (part file + topics, :mod:`mbde_core.replay.worker`) or
    in-memory runs (records + particles, :class:`mbde_core.replay.runner.EstimatorRun`).
    Merges the estimators' part files (each in time order; see
    :mod:`mbde_core.replay.encode`) by (time, kind, estimator): at equal times the
    estimates of every estimator come before the particle sets, in estimator order.
    Streams: memory does not grow with the bag. Returns {topic: messages written}.
    """
    import tempfile

    f = RosbagsFactory()
    with tempfile.TemporaryDirectory() as tmp, BagWriter(path, storage) as bag:
        parts = []  # (part file, [(topic, type)]) per run; in-memory runs are encoded first
        for r in results:
            if getattr(r, "part", None):
                parts.append((r.part, r.topics))
            else:
                part = os.path.join(tmp, f"{r.name}.part")
                parts.append((part, write_records_part(part, r.name, r.records, r.particles, source.mechanism)))
        if description:
            bag.add_topic("/mbde/description", STRING, "transient_local")
            bag.write("/mbde/description", source.start, string_msg(f, description))
        for _, topics in parts:
            for topic, typename in topics:
                bag.add_topic(topic, typename)
        streams = [_tagged(read_part(part), k) for k, (part, _) in enumerate(parts)]
        names = [[t for t, _ in topics] for _, topics in parts]
        for t_ns, _, run, _, topic, data in heapq.merge(*streams):
            bag.write_raw_ns(names[run][topic], t_ns, data)
        return dict(bag.counts)


def _tagged(records, run: int):
    for seq, (t_ns, kind, topic, data) in enumerate(records):
        yield t_ns, kind, run, seq, topic, data


def write_report(path: str, doc: dict, plots: list[str], title: str = "mbde replay report") -> None:
    lines = [f"# {title}", "", f"- bag: `{doc['bag']}`", f"- mechanism: {doc['mechanism']} "
             f"(z = {', '.join(doc['independent_coordinates'])})", f"- duration: {doc['duration_s']:.3f} s",
             f"- ground truth: {'yes' if doc['ground_truth'] else 'no' if doc.get('reference') else 'no (accuracy metrics omitted)'}",
             "- readings: " + ", ".join(f"{k}: {v}" for k, v in doc["readings"].items())]
    if doc["skipped_messages"]:
        lines.append("- skipped messages: " + ", ".join(f"{k}: {v}" for k, v in doc["skipped_messages"].items()))
    ref = doc.get("reference") or {}
    if ref.get("kind") == "smoother":
        lines.append("- reference of RMSE and NEES: **the batch smoother** of the same readings (`mbde replay "
                     "--reference smoother`), not ground truth; NEES uses P - P_smoother. " + reference_note(ref))
    lines += ["", "## Summary", "", summary_table(doc, markdown=True), ""]
    lines += ["RMSE per independent coordinate; NEES/NIS: mean and the 95 % chi-square band of the mean "
              "(single run: successive steps are correlated, the band is optimistic); step time per filter "
              "step; RTF = processing time / data duration (< 1: faster than real time).", ""]
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
    """The metrics table printed by ``mbde replay`` and ``make demo``."""
    cols = ["estimator", "RMSE z", "RMSE zd", "RMSE zdd", "NEES", "NEES band", "NIS", "us/step", "RTF", "fused", "rejected"]
    rows = []
    for name, entry in doc["estimators"].items():
        m = entry["metrics"] or {}
        rm = m.get("rmse", {})
        nees = m.get("nees", {})
        nis = m.get("nis", {})
        c = m.get("counters", {})
        rej = sum(c.get(k, 0) for k in ("rejected_gate", "out_of_order", "non_finite", "unknown_sensor"))
        band = nees.get("band_95")
        rows.append([
            name,
            _fmt_list(rm.get("z")), _fmt_list(rm.get("zd")), _fmt_list(rm.get("zdd")),
            _fmt(nees.get("mean")), f"[{band[0]:.2f}, {band[1]:.2f}]" if band else "-",
            _fmt(nis.get("mean")),
            _fmt(m.get("step_time_us", {}).get("mean"), ".0f"),
            _fmt(m.get("realtime_factor"), ".3f"),
            str(c.get("fused", "-")), str(rej),
        ])
    if markdown:
        out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        out += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(out)
    widths = [max(len(cols[i]), *(len(r[i]) for r in rows)) for i in range(len(cols))]
    line = lambda vals: "  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(vals, widths)))  # noqa: E731
    return "\n".join([line(cols)] + [line(r) for r in rows])


def _fmt(v, spec=".3g"):
    return "-" if v is None else format(v, spec)


def _fmt_list(v):
    if v is None:
        return "-"
    return "/".join(format(x, ".3g") for x in v)
