"""Tables of ``mbde bench pf`` (markdown): tracking, branches, integrators, the Fig. 8 sweep
and the separatrix runs."""
from __future__ import annotations

import time

import numpy as np

from mbde_bench.pf_runs import BRANCH_P, L1, _fmt_s, _stats
from mbde_core import runs
from mbde_core.estimators.configure import defaults

LOST_DEG = 10.0  # a run whose RMSE over t >= 1 s exceeds this has lost track
SEPARATRIX_ERRORS = (0, 1, 3)
INTEGRATOR_RUNS = ("rk4", "midpoint", "symplectic_euler", "euler")


def separatrix_table(rows) -> str:
    lines = ["", "The same on pf_sim as shipped (released at 60 deg, 10 deg from the unstable top of the potential at "
             "70 deg), sigma_a 1 m/s^2: mean RMSE over t >= 1 s [deg] (lost runs)"]
    for e in SEPARATRIX_ERRORS:
        rs = [r for r in rows if r["error_pct"] == float(e) and not r["failed"]]
        if rs:
            v = np.array([r["rmse_deg"] for r in rs])
            lines.append(f"  crank error {e:g} %: {np.mean(v):.3g} ({int(np.sum(v > LOST_DEG))} of {len(v)} lost)")
    return "\n".join(lines)


def tracking_table(rows) -> str:
    lines = ["", "Tracking, paper 000 sec. 6.1.1 (pf_sim, uniform prior, Table 1): convergence = error < 2 deg "
             "for the rest of the run; RMSE over t >= 1 s", 
             f"{'variant':<8}{'runs':>6}{'converged':>11}{'conv. median [s]':>18}{'conv. max [s]':>15}"
             f"{'RMSE median [deg]':>19}{'RMSE mean [deg]':>17}{'recoveries':>12}"]
    for variant in ("mbde", "paper", "defaults"):
        rs = [r for r in rows if r["variant"] == variant and not r["failed"]]
        if not rs:
            continue
        conv = _stats([r["convergence_s"] for r in rs])
        rm = _stats([r["rmse_deg"] for r in rs])
        lines.append(f"{variant:<8}{len(rs):>6}{conv['finite']:>7}/{len(rs):<3}{_fmt_s(conv['median']):>18}"
                     f"{_fmt_s(conv['max']):>15}{rm['median']:>19.3f}{rm['mean']:>17.3f}"
                     f"{sum(r['recoveries'] for r in rs):>12}")
    return "\n".join(lines)


def branch_table(rows) -> str:
    lines = ["", f"Branch identification: time until P(true branch) > {BRANCH_P} first (and from when on it stays "
             "above); paper: < 6 readings = 36 ms on the rig",
             f"{'case':<16}{'branch':>7}{'runs':>6}{'identified':>12}{'first: median':>15}{'max [s]':>9}"
             f"{'readings':>10}{'stays: median':>15}{'max [s]':>9}{'RMSE t>=1s [deg]':>18}"]
    for variant in ("rig (Table 2)", "sim (Table 1)", "sim paper-only"):
        for b in (0, 1):
            key = f"rig{b}" if variant.startswith("rig") else f"simb{b}"
            rs = [r for r in rows if r["variant"] == variant and r["truth"] == key and not r["failed"]]
            if not rs:
                continue
            st = _stats([r["branch_s"] for r in rs])
            stay = _stats([r["branch_stay_s"] for r in rs])
            period = 0.006 if variant.startswith("rig") else 0.005
            reads = f"{st['median'] / period + 1:.0f}" if np.isfinite(st["median"]) else "-"
            rm = _stats([r["rmse_deg"] for r in rs])
            lines.append(f"{variant:<16}{b:>7}{len(rs):>6}{stay['finite']:>8}/{len(rs):<3}{_fmt_s(st['median']):>15}"
                         f"{_fmt_s(st['max']):>9}{reads:>10}{_fmt_s(stay['median']):>15}{_fmt_s(stay['max']):>9}"
                         f"{rm['median']:>18.2f}")
    lines.append("(identified = runs whose P(true branch) ends above the threshold; readings = gyro readings "
                 "up to the first crossing, median)")
    return "\n".join(lines)


def integrator_table(rows) -> str:
    lines = ["", "Integrators (paper 002 sec. 3): pf_sim, first 3 s, known start (init: gaussian), Table 1 "
             "settings, 5 ms step: RMSE of the crank angle over the run [deg]",
             f"{'integrator':<18}{'runs':>6}{'RMSE median':>13}{'RMSE max':>10}{'lost (>10 deg)':>16}{'us/step':>9}"]
    for integ in INTEGRATOR_RUNS:
        rs = [r for r in rows if r["variant"] == integ and not r["failed"]]
        if not rs:
            continue
        v = np.array([r["rmse_all_deg"] for r in rs])
        lines.append(f"{integ:<18}{len(rs):>6}{np.median(v):>13.3f}{np.max(v):>10.3f}{int(np.sum(v > 10)):>16}"
                     f"{np.mean([r['step_us'] for r in rs]):>9.0f}")
    return "\n".join(lines)


def sweep_summary(rows, sigmas, errors):
    out = []
    for e in errors:
        for s in sigmas:
            rs = [r for r in rows if r["error_pct"] == float(e) and r["sigma_a"] == float(s)]
            ok = [r for r in rs if not r["failed"] and np.isfinite(r["rmse_deg"])]
            out.append({"error_pct": float(e), "sigma_a_ms2": float(s), "sigma_a_rads2": float(s) / L1, "runs": len(rs),
                        "failed": len(rs) - len(ok),
                        "rmse_mean_deg": float(np.mean([r["rmse_deg"] for r in ok])) if ok else None,
                        "rmse_median_deg": float(np.median([r["rmse_deg"] for r in ok])) if ok else None,
                        "lost": int(sum(r["rmse_deg"] > LOST_DEG for r in ok)),
                        "recoveries": int(sum(r.get("recoveries", 0) for r in ok))})
    return out


def sweep_table(summary, sigmas, errors, release) -> str:
    lines = ["", f"Robustness sweep, paper 000 Fig. 8 (pf_sim released from {release:g} deg, uniform prior): mean RMSE "
             f"[deg] of the crank angle over t >= 1 s (runs with RMSE > {LOST_DEG:g} deg = lost track); rows: crank "
             "length and mass error; columns: sigma_a in m/s^2 (rad/s^2 = m/s^2 / L1)",
             f"{'error':<8}" + "".join(f"{f'{s:g} ({s / L1:g})':>15}" for s in sigmas)]
    cells = {(c["error_pct"], c["sigma_a_ms2"]): c for c in summary}
    for e in errors:
        vals = []
        for s in sigmas:
            c = cells[(float(e), float(s))]
            v = "fail" if c["rmse_mean_deg"] is None else f"{c['rmse_mean_deg']:.3g}"
            v += f" ({c['lost']})"
            if c["failed"]:
                v += f" {c['failed']}f"
            vals.append(f"{v:>15}")
        lines.append(f"{f'{e:g} %':<8}" + "".join(vals))
    lines.append(f"{'median':<8}" + "".join(" " * 15 for _ in sigmas))
    for e in errors:
        vals = []
        for s in sigmas:
            c = cells[(float(e), float(s))]
            vals.append(f"{'-' if c['rmse_median_deg'] is None else format(c['rmse_median_deg'], '.3g'):>15}")
        lines.append(f"{f'{e:g} %':<8}" + "".join(vals))
    return "\n".join(lines)
