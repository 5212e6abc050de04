"""The tables of ``mbde bench motors`` (:mod:`mbde_bench.motors`) and issue 42's targets
as pass/fail columns, from the median over the seeds of each row's **tracking** RMSE of z
(from the time the estimate is on track to the end, :mod:`mbde_bench.motors_rows`, over
the runs that got on track at all; a particle filter's search from its uniform start is
its acquisition time, a column of its own, not an error of its tracking). A run is
**lost** when it is not on track within ``ACQUIRE_WITHIN`` (1 s, the acquisition bench's
rule, :mod:`mbde_bench.pf_acquisition`) of its first estimate and to the end, or its
tracking RMSE exceeds ``LOST``; a row with a run lost fails its target:

- torque measured: every estimator within ``MEASURED_X`` (1.5) x its RMSE on the
  reference without an unknown force (``released``: the same motion with the torque in the
  model where the motor is a function of time, the linkage released without a motor where
  it is a speed controller, :func:`mbde_bench.motors.reference_document`);
- torque unknown: every estimator with input states acquires (no run lost) and stays
  within ``UNKNOWN_X`` (3) x the best of them (of those with no run lost);
- the smoother: the best, or within ``SMOOTHER_X`` (1.2) x the best filter (per variant).

Rows "n/a: <why>" (an estimator that does not take the input) and failed runs have no
target; a scenario without a released reference (``adekf``) has no measured target.
"""
from __future__ import annotations

import numpy as np

from mbde_bench.motors_rows import SMOOTHER, Row
from mbde_bench.results import table

LOST = 0.1  # rad
ACQUIRE_WITHIN = 1.0  # s
MEASURED_X, UNKNOWN_X, SMOOTHER_X = 1.5, 3.0, 1.2
MEASURED_TARGETS = ("measured", "unknown")  # the variants with a target column


def lost(row: Row) -> bool:
    """Not on track within ``ACQUIRE_WITHIN`` to the end, or tracking RMSE > ``LOST`` (or failed)."""
    t = row.acquired_after
    return bool(t is None or t > ACQUIRE_WITHIN or not (row.track < LOST))


def _median(v) -> float:
    v = np.array([x for x in v if x is not None], float)
    v = v[np.isfinite(v)]
    return float(np.median(v)) if v.size else float("nan")


def _stats(rs, variant: str, est: str):
    """{rmse: median tracking RMSE over the runs that got on track at all (the acquisition
    time beside it says when), acq: median acquisition time (nan if none acquired), lost,
    n, nees: median tracking NEES/dim, cpu: median, failed, errors} over the seeds, or
    {na: why} for an n/a row."""
    vals = [r["variants"].get(variant, {}).get(est) for r in rs]
    vals = [v for v in vals if v is not None]
    if not vals:
        return None
    if isinstance(vals[0], str):
        return {"na": vals[0]}
    vals = [v if isinstance(v, Row) else Row(*v) for v in vals]
    tracked = [v for v in vals if v.track < LOST]
    return {"rmse": _median(v.track for v in tracked), "acq": _median(v.acquired_after for v in vals),
            "lost": sum(lost(v) for v in vals), "n": len(vals), "rmse_run": _median(v.rmse for v in vals),
            "nees": _median(v.nees if v.tracking_nees is None else v.tracking_nees for v in tracked),
            "cpu": _median(v.cpu for v in vals), "failed": sum(bool(v.error) for v in vals),
            "errors": sorted({v.error for v in vals if v.error})}


def stats(rows, name: str) -> dict:
    """{variant: {estimator: stats}} of scenario ``name`` (:func:`_stats`)."""
    rs = [r for r in rows if r["scenario"] == name]
    out = {}
    for r in rs:
        for v, ests in r["variants"].items():
            for e in ests:
                out.setdefault(v, {}).setdefault(e, None)
    return {v: {e: _stats(rs, v, e) for e in ests} for v, ests in out.items()}


def _ok(s) -> bool:
    return s is not None and "na" not in s and np.isfinite(s["rmse"])


def _scored(s) -> bool:
    """A row with a target: a tracking RMSE, or runs lost that did not fail (those fail it)."""
    return _ok(s) or (s is not None and "na" not in s and s["lost"] > s["failed"])


def targets(st: dict, released: dict | None) -> dict:
    """{variant: {estimator: (ratio, passed)}} of the targets (module doc); released: the
    reference scenario's {estimator: stats} (None: no measured target)."""
    out = {}
    for variant, ests in st.items():
        filters = {e: s for e, s in ests.items() if e != SMOOTHER and _ok(s)}
        kept = [s["rmse"] for s in filters.values() if s["lost"] == 0]  # the best of those never lost
        best = min(kept or [s["rmse"] for s in filters.values()], default=float("nan"))
        res = {}
        for e, s in ests.items():
            if not _scored(s):
                continue
            if not _ok(s):  # every run lost
                res[e] = (float("inf"), False)
            elif e == SMOOTHER:  # no filter on track at all: the smoother is the best if it is
                ratio = s["rmse"] / best if best > 0 else float("nan")
                res[e] = (ratio, bool(ratio <= SMOOTHER_X) if np.isfinite(ratio) else s["lost"] == 0)
            elif variant == "measured" and released and _ok(released.get(e)) and released[e]["rmse"] > 0:
                ratio = s["rmse"] / released[e]["rmse"]
                res[e] = (ratio, bool(ratio <= MEASURED_X and s["lost"] == 0))
            elif variant == "unknown" and best > 0:
                ratio = s["rmse"] / best
                res[e] = (ratio, bool(ratio <= UNKNOWN_X and s["lost"] == 0))
        out[variant] = res
    return out


def _reference(rows, name: str, scenarios) -> dict | None:
    ref = scenarios[name][3]
    return stats(rows, ref).get("released") if ref else None


def _cell(s, key: str, fmt: str) -> str:
    if s is None:
        return "-"
    if "na" in s:
        return s["na"] if key == "rmse" else "-"
    if key == "lost":
        return f"{s['lost']} / {s['n']}"
    v = s[key]
    if key == "rmse" and not np.isfinite(v):
        return "failed" if s["failed"] == s["n"] else f"lost (whole run {s['rmse_run']:{fmt}})"
    if not np.isfinite(v):
        return "never" if key == "acq" else "-"
    return format(v, fmt)


def _verdict(t) -> str:
    how = "lost" if np.isinf(t[0]) else "no filter on track" if np.isnan(t[0]) else format(t[0], ".2g") + "x"
    return f"{'yes' if t[1] else 'NO'} ({how})"


def summary_tables(rows, names, scenarios) -> str:
    """Markdown: one table per scenario, a row per estimator (and the smoother), per variant
    the median RMSE, runs lost, NEES/dim, CPU and the target (ratio, yes / NO)."""
    md = []
    for name in names:
        st = stats(rows, name)
        if not st:
            continue
        tg = targets(st, _reference(rows, name, scenarios))
        variants = list(st)
        ests = list(dict.fromkeys(e for v in variants for e in st[v]))
        head = ["estimator"]
        for v in variants:
            head += [f"{v}: tracking RMSE z", "on track after [s]", "lost", "NEES/dim", "CPU s"] + (["target"] if v in MEASURED_TARGETS else [])
        body, errors = [], set()
        for e in ests:
            row = [e]
            for v in variants:
                s = st[v].get(e)
                row += [_cell(s, "rmse", ".2e"), _cell(s, "acq", ".2f"), _cell(s, "lost", ""), _cell(s, "nees", ".3g"), _cell(s, "cpu", ".1f")]
                if v in MEASURED_TARGETS:
                    t = tg.get(v, {}).get(e)
                    row.append("-" if t is None else _verdict(t))
                errors.update(s.get("errors", []) if s else [])
            body.append(row)
        n = len({r["seed"] for r in rows if r["scenario"] == name})
        ref = scenarios[name][3]
        note = ("\n\nfailed: " + "; ".join(sorted(errors))) if errors else ""
        users = [n for n in scenarios if scenarios[n][3] == name and n != name]
        where = (f"measured vs {'its released variant: the same motion, the torque in the model' if ref == name else ref}" if ref else
                 f"the released reference of {', '.join(users)}" if users else "no released reference")
        md.append(f"## {name} ({scenarios[name][0]}.yaml, {n} seed(s); {where})\n\n{table(head, body)}{note}\n")
    return "\n".join(md)



def targets_table(rows, names, scenarios) -> str:
    """Markdown: per scenario, how many rows meet each target (module doc)."""
    head = ["scenario", f"measured within {MEASURED_X:g}x of released (no unknown force)", f"unknown within {UNKNOWN_X:g}x of the best, none lost",
            f"smoother within {SMOOTHER_X:g}x of the best filter (measured / unknown)"]
    body = []
    for name in names:
        st = stats(rows, name)
        if not st or not any(v in st for v in MEASURED_TARGETS):
            continue
        tg = targets(st, _reference(rows, name, scenarios))
        cells = []
        for v in MEASURED_TARGETS:
            res = {e: t for e, t in tg.get(v, {}).items() if e != SMOOTHER}
            fails = [e for e, t in res.items() if not t[1]]
            cells.append(f"{len(res) - len(fails)} / {len(res)}" + (f" (not: {', '.join(fails)})" if fails else "")
                         if res else "-")
        sm = [tg.get(v, {}).get(SMOOTHER) for v in MEASURED_TARGETS]
        cells.append(" / ".join("-" if t is None else _verdict(t) for t in sm))
        body.append([name] + cells)
    return "## Targets (issue 42)\n\n" + table(head, body) + "\n"
