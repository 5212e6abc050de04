"""Tables 1 and 2 of ``mbde bench trust`` from its per-run rows (:mod:`mbde_bench.trust_runs`).

Table 1 (calibration of the filters' uncertainty, the nominal runs): per case x model x
estimator the runs, the median over the runs of the mean NEES / dof (target [0.5, 2]),
the median of the mean NIS / dof (the readings' own test, no truth needed: far below 1,
the readings agree with the predictions better than the estimator says -- its noise is
wider than the data need), the mean coverage of the 95 % intervals (target 90-98 %) and
the fraction of runs whose mean NEES lies above ``(!)`` or below ``(u)`` its 95 % band
(a consistent estimator: about 5 % together).

Table 2 (the trust verdict against truth): per kind of run (nominal, far-off start, each
injected fault, ``motors``: the motors bench's scenarios with the torque measured and
unknown, nominal) x estimator, over every case and model: the steps the verdict called OK
and the percentage of them with every coordinate of z within 3 sigma of the estimate's
own covariance (target >= 95 %), the steps off by more than 10 sigma (sqrt(NEES) > 10)
for at least 1 s and the percentage of them called LOST (target >= 90 %), the longest
delay from the start of such a stretch to its first LOST, and the mean share of time at
each level.
"""
from __future__ import annotations

import numpy as np

from mbde_bench.results import table

NEES_TARGET = (0.5, 2.0)
COVERAGE_TARGET = (0.90, 0.98)
OK_TARGET = 0.95
LOST_TARGET = 0.90


def _ok(rows) -> list:
    return [r for r in rows if r.get("status") == "ok"]


def calibration(rows) -> list[dict]:
    """Table 1's summaries (nominal runs) in the rows' order of cases, models, estimators."""
    out = []
    nominal = [r for r in rows if r["kind"] == "nominal"]
    keys = dict.fromkeys((r["case"], r["model"], r["estimator"]) for r in nominal)
    for case, model, name in keys:
        rs = [r for r in nominal if (r["case"], r["model"], r["estimator"]) == (case, model, name)]
        ok = [r for r in _ok(rs) if r["nees"] is not None and r["dof"]]
        s = {"case": case, "model": model, "estimator": name, "runs": len(rs), "failed": sum(r["status"] == "error" for r in rs),
             "n/a": sum(r["status"] == "n/a" for r in rs)}
        if ok:
            flags = [r["flag"] for r in ok]
            s.update(nees_per_dof=float(np.median([r["nees"] / r["dof"] for r in ok])),
                     coverage=float(np.mean([r["coverage"] for r in ok])),
                     flagged_over=flags.count("!") / len(ok), flagged_under=flags.count("u") / len(ok))
            nis = [r["nis"] / r["nis_dof"] for r in ok if r.get("nis") is not None and r.get("nis_dof")]
            s["nis_per_dof"] = float(np.median(nis)) if nis else None
        out.append(s)
    return out


def in_targets(s) -> str:
    if "nees_per_dof" not in s:
        return "n/a" if s["n/a"] else "FAILED"
    good = NEES_TARGET[0] <= s["nees_per_dof"] <= NEES_TARGET[1] and COVERAGE_TARGET[0] <= s["coverage"] <= COVERAGE_TARGET[1]
    return "ok" if good and not s["failed"] else "no"


def table1(summary) -> str:
    rows = []
    for s in summary:
        if "nees_per_dof" not in s:
            rows.append([s["case"], s["model"], s["estimator"], s["runs"], "-", "-", "-", "-", "-", in_targets(s)])
            continue
        nis = "-" if s.get("nis_per_dof") is None else f"{s['nis_per_dof']:.2f}"
        rows.append([s["case"], s["model"], s["estimator"], s["runs"], f"{s['nees_per_dof']:.2f}", nis, f"{100 * s['coverage']:.1f}",
                     f"{100 * s['flagged_over']:.0f}", f"{100 * s['flagged_under']:.0f}", in_targets(s)])
    return table(["case", "model", "estimator", "runs", "NEES/dof (median)", "NIS/dof (median)", "95 % coverage [%]", "runs (!) [%]",
                  "runs (u) [%]", "in targets"], rows)


def verdict(rows) -> list[dict]:
    """Table 2's summaries: per (kind, estimator), counts summed over cases, models and runs."""
    out = []
    ok = _ok(rows)
    for kind, name in dict.fromkeys((r["kind"], r["estimator"]) for r in ok):
        rs = [r for r in ok if (r["kind"], r["estimator"]) == (kind, name)]
        ok_n, ok_in = sum(r["ok_steps"] for r in rs), sum(r["ok_within"] for r in rs)
        off_n, off_lost = sum(r["off_steps"] for r in rs), sum(r["off_lost"] for r in rs)
        delays = [r["lost_delay_max"] for r in rs if r["lost_delay_max"] is not None]
        frac = {lv: float(np.mean([(r["fraction"] or {}).get(lv, 0.0) for r in rs])) for lv in ("OK", "DEGRADED", "LOST")}
        out.append({"kind": kind, "estimator": name, "runs": len(rs), "ok_steps": ok_n,
                    "ok_within": ok_in / ok_n if ok_n else None, "off_steps": off_n,
                    "off_lost": off_lost / off_n if off_n else None, "delay_max": max(delays) if delays else None,
                    "runs_off": sum(r["off_steps"] > 0 for r in rs), "fraction": frac})
    return out


def table2(summary) -> str:
    pct = lambda v: "-" if v is None else f"{100 * v:.1f}"  # noqa: E731
    rows = []
    for s in summary:
        miss = []
        if s["ok_within"] is not None and s["ok_within"] < OK_TARGET:
            miss.append("OK")
        if s["off_lost"] is not None and s["off_lost"] < LOST_TARGET:
            miss.append("LOST")
        f = s["fraction"]
        rows.append([s["kind"], s["estimator"], s["runs"], s["ok_steps"], pct(s["ok_within"]), s["off_steps"], s["runs_off"],
                     pct(s["off_lost"]), "-" if s["delay_max"] is None else f"{s['delay_max']:.2f}",
                     f"{100 * f['OK']:.0f} / {100 * f['DEGRADED']:.0f} / {100 * f['LOST']:.0f}",
                     "missed: " + ", ".join(miss) if miss else "ok"])
    return table(["runs of", "estimator", "runs", "OK steps", "OK within 3 sigma [%]", "steps > 10 sigma for >= 1 s",
                  "runs with such", "of them LOST [%]", "max delay to LOST [s]", "time OK / DEGRADED / LOST [%]",
                  "targets"], rows)
