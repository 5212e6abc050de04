"""Closing the loop (``mbde bench identify``): calibrate the paper-003 gravity-error cases
and replay every Kalman observer before and after.

For each scenario (config/scenarios/<case>.yaml, 10 s, its seed) and gravity error e in
{1, 4} m/s^2: simulate the bag (``mbde simulate`` with model_errors.gravity = e: the
estimator's model has |g| + e), write the estimator's mechanism as a file (the scenario's
mechanism with that gravity, plus its sensors), ``mbde identify BAG --mechanism
start.yaml --params gravity``, then ``mbde replay BAG --mechanism start.yaml`` and
``mbde replay BAG --mechanism calibrated.yaml`` with ukf, errorekf, dekf, cekf, diekfpm
(the same replay path and initial state, only the model differs). RMSE of z [rad] from
each replay's metrics.json (RMS over the independent coordinates of the five-bar).
"""
from __future__ import annotations

import contextlib
import io
import json
import os

import yaml

OBSERVERS = "ukf,errorekf,dekf,cekf,diekfpm"
GRAVITY_ERRORS = (1.0, 4.0)


def _mbde(*args) -> str:
    """Run an mbde command in-process, its output captured; raises on a non-zero status."""
    from mbde_core.cli.main import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        status = main([str(a) for a in args])
    if status:
        raise RuntimeError(f"mbde {args[0]} failed ({status}): {buf.getvalue()[-500:]}")
    return buf.getvalue()


def _rmse(metrics_path) -> dict:
    with open(metrics_path, encoding="utf-8") as fh:
        doc = json.load(fh)
    out = {}
    for name, est in doc["estimators"].items():
        rmse = (est.get("metrics") or {}).get("rmse") or {}
        z = rmse.get("z")
        if isinstance(z, list):  # per independent coordinate: their RMS
            z = None if any(v is None for v in z) else (sum(v * v for v in z) / len(z)) ** 0.5
        out[name] = None if z is None else float(z)
    return out


def loop_case(task) -> dict:
    from mbde_core.bench.common import config_path
    from mbde_core.scenario import load_scenario
    from mbde_core.simulator.bag import write_simulation_bag

    case, gerr, root = task
    work = os.path.join(root, f"{case}_g{gerr:g}")
    os.makedirs(work, exist_ok=True)
    row = {"case": case, "gravity_error": gerr}
    try:
        sc = load_scenario(config_path("scenarios", f"{case}.yaml")).with_overrides(gravity_error=gerr, duration=10.0)
        bag = os.path.join(work, "bag")
        if not os.path.exists(bag):
            write_simulation_bag(sc, bag, "sqlite3")
        doc = sc.document()
        mech = doc["mechanism"]
        mech["gravity"] = [float(g) for g in sc.estimator_mechanism().gravity]
        mech["sensors"] = doc["sensors"]
        start = os.path.join(work, "start.yaml")
        with open(start, "w", encoding="utf-8") as fh:
            fh.write("%YAML 1.2\n---\n# the estimator's model of the bag (gravity error included)\n")
            yaml.safe_dump(mech, fh, sort_keys=False, default_flow_style=None, width=100)
        ident = os.path.join(work, "identified")
        _mbde("identify", bag, "--mechanism", start, "--params", "gravity", "--out", ident, "--force", "--no-plots")
        with open(os.path.join(ident, "identification.json"), encoding="utf-8") as fh:
            info = json.load(fh)["parameters"]["gravity"]
        row.update(g_true=float(abs(sc.truth_mechanism().gravity[1])), g_start=info["initial"], g_estimate=info["estimate"],
                   g_std=info["std"])
        for label, mfile in (("before", start), ("after", os.path.join(ident, "calibrated.yaml"))):
            out = os.path.join(work, f"replay_{label}")
            _mbde("replay", bag, "--mechanism", mfile, "--estimators", OBSERVERS, "--out", out, "--force", "--no-plots")
            row[label] = _rmse(os.path.join(out, "metrics.json"))
        row["failed"] = False
    except Exception as exc:  # noqa: BLE001 - reported in the table
        row.update(failed=True, error=f"{type(exc).__name__}: {exc}"[:400])
    return row


def close_the_loop(cases, out: str, jobs: int) -> list:
    root = os.path.join(out, "loop")
    os.makedirs(root, exist_ok=True)
    tasks = [(c, g, root) for c in cases for g in GRAVITY_ERRORS]
    from mbde_core import runs

    outcomes = runs.run_tasks(_loop_task, tasks, label="closing the loop", jobs=jobs)  # local: work files
    return [o.value if o.ok else {"case": t[0], "gravity_error": t[1], "failed": True, "error": o.error}
            for o, t in zip(outcomes, tasks)]


def _loop_task(shared, task) -> dict:
    """mbde_core.runs task (nothing shared)."""
    return loop_case(task)


def format_loop(rows) -> str:
    names = OBSERVERS.split(",")
    lines = ["\nclosing the loop: RMSE of z [rad], replay with the erroneous model -> with calibrated.yaml "
             "(identified |g|, true 9.81 m/s^2)"]
    lines.append(f"{'case':<24}{'|g| start -> identified':>28}" + "".join(f"{n:>22}" for n in names) + f"{'all better':>12}")
    for r in rows:
        label = f"{r['case']} +{r['gravity_error']:g}"
        if r["failed"]:
            lines.append(f"{label:<24}  failed: {r.get('error', '')}")
            continue
        g = f"{r['g_start']:.2f} -> {r['g_estimate']:.4f}+-{r['g_std']:.1e}" if r["g_estimate"] is not None else "not identified"
        cells, better = [], True
        for n in names:
            b, a = r["before"].get(n), r["after"].get(n)
            fmt = lambda v: "fail" if v is None else f"{v:.3g}"  # noqa: E731
            cells.append(f"{fmt(b) + ' -> ' + fmt(a):>22}")
            better &= a is not None and (b is None or a < b)
        lines.append(f"{label:<24}{g:>28}" + "".join(cells) + f"{'yes' if better else 'NO':>12}")
    return "\n".join(lines)
