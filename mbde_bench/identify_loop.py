"""Closing the loop (``mbde bench identify``): calibrate the paper-003 gravity-error cases
and replay every Kalman observer before and after.

For each scenario (config/scenarios/<case>.yaml, 10 s) the bags of seeds s0..s0+R are
simulated (``mbde simulate``: same motion, independent sensor noise). For each gravity
error e in {1, 4} m/s^2 the estimator's model (the scenario's mechanism with |g| + e, plus
its sensors) is written as start.yaml, ``mbde identify BAG0 --mechanism start.yaml
--params gravity`` calibrates it, and the R held-out bags are replayed (``mbde replay BAG
--mechanism start.yaml`` and ``--mechanism calibrated.yaml``, the same replay path and
initial state, only the model differs) with ukf, errorekf, dekf, cekf, diekfpm; so are they
with the true model (no gravity error: what a perfect calibration would give, the
reference for "after"). The table gives the mean over the held-out bags of the RMSE of z
[rad] (RMS over the independent coordinates of the five-bar), from each replay's
metrics.json.
"""
from __future__ import annotations

import contextlib
import io
import json
import os

import yaml

from mbde_core import runs
from mbde_core.cli.main import main
from mbde_core.config.paths import config_path
from mbde_core.scenario import load_scenario
from mbde_core.simulator.bag import write_simulation_bag

OBSERVERS = "ukf,errorekf,dekf,cekf,diekfpm"
GRAVITY_ERRORS = (1.0, 4.0)


def _mbde(*args) -> str:
    """Run an mbde command in-process, its output captured; raises on a non-zero status."""
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


def _start_file(sc, gerr: float, path: str) -> str:
    """The estimator's model of the scenario with gravity error ``gerr`` as a mechanism file."""
    erring = sc.with_overrides(gravity_error=gerr)
    doc = erring.document()
    mech = doc["mechanism"]
    mech["gravity"] = [float(g) for g in erring.estimator_mechanism().gravity]
    mech["sensors"] = doc["sensors"]
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(f"%YAML 1.2\n---\n# the estimator's model of {sc.name} with gravity error {gerr:+g} m/s^2\n")
        yaml.safe_dump(mech, fh, sort_keys=False, default_flow_style=None, width=100)
    return path


def loop_case(task) -> list:
    """One scenario: bags of seeds 0..R, then per gravity error: identify on bag 0, replay
    bags 1..R (held out: other noise) with the start and the calibrated file."""
    case, root, held_out = task
    work = os.path.join(root, case)
    os.makedirs(work, exist_ok=True)
    base = load_scenario(config_path("scenarios", f"{case}.yaml")).with_overrides(gravity_error=0.0, duration=10.0)
    bags = []
    try:
        for k in range(held_out + 1):
            bag = os.path.join(work, f"bag{k}")
            if not os.path.exists(bag):
                write_simulation_bag(base.with_overrides(seed=base.seed + k), bag, "sqlite3")
            bags.append(bag)
    except Exception as exc:  # noqa: BLE001 - reported in the table
        return [{"case": case, "gravity_error": g, "failed": True, "error": f"{type(exc).__name__}: {exc}"[:400]}
                for g in GRAVITY_ERRORS]
    def replay_all(mfile, label) -> dict:
        """Mean RMSE per observer over the held-out bags replayed with mechanism file mfile."""
        per = []
        for k, bag in enumerate(bags[1:] or bags[:1]):
            out = os.path.join(work, f"replay_{label}_{k}")
            _mbde("replay", bag, "--mechanism", mfile, "--estimators", OBSERVERS, "--out", out, "--force", "--no-plots")
            per.append(_rmse(os.path.join(out, "metrics.json")))
        return {n: (None if any(p[n] is None for p in per) else float(sum(p[n] for p in per) / len(per))) for n in per[0]}

    try:  # reference: the true model (what a perfect calibration would give on these bags)
        true_model = replay_all(_start_file(base, 0.0, os.path.join(work, "true_model.yaml")), "true_model")
    except Exception:  # noqa: BLE001 - the reference is optional
        true_model = None
    rows = []
    for gerr in GRAVITY_ERRORS:
        row = {"case": case, "gravity_error": gerr, "held_out_bags": held_out, "true_model": true_model}
        try:
            start = _start_file(base, gerr, os.path.join(work, f"start_g{gerr:g}.yaml"))
            ident = os.path.join(work, f"identified_g{gerr:g}")
            _mbde("identify", bags[0], "--mechanism", start, "--params", "gravity", "--out", ident, "--force", "--no-plots")
            with open(os.path.join(ident, "identification.json"), encoding="utf-8") as fh:
                info = json.load(fh)["parameters"]["gravity"]
            row.update(g_start=info["initial"], g_estimate=info["estimate"], g_std=info["std"])
            row["before"] = replay_all(start, f"g{gerr:g}_before")
            row["after"] = replay_all(os.path.join(ident, "calibrated.yaml"), f"g{gerr:g}_after")
            row["failed"] = False
        except Exception as exc:  # noqa: BLE001 - reported in the table
            row.update(failed=True, error=f"{type(exc).__name__}: {exc}"[:400])
        rows.append(row)
    return rows


def close_the_loop(cases, out: str, jobs: int, held_out: int = 4) -> list:
    root = os.path.join(out, "loop")
    os.makedirs(root, exist_ok=True)
    tasks = [(c, root, held_out) for c in cases]

    outcomes = runs.run_tasks(_loop_task, tasks, label="closing the loop", jobs=jobs)  # local: work files
    rows = []
    for o, t in zip(outcomes, tasks):
        rows += o.value if o.ok else [{"case": t[0], "gravity_error": g, "failed": True, "error": o.error} for g in GRAVITY_ERRORS]
    return rows


def _loop_task(shared, task) -> list:
    """mbde_core.runs task (nothing shared)."""
    return loop_case(task)


def format_loop(rows) -> str:
    names = OBSERVERS.split(",")
    held = rows[0].get("held_out_bags", 0) if rows else 0
    lines = [f"\nclosing the loop: mean RMSE of z [rad] over {held} held-out bags, replay with the erroneous model -> "
             "with calibrated.yaml (|g| identified on another bag; true 9.81 m/s^2)"]
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
    for case in dict.fromkeys(r["case"] for r in rows):  # the true model on the same bags
        ref = next((r["true_model"] for r in rows if r["case"] == case and r.get("true_model")), None)
        if ref is not None:
            lines.append(f"{case + ' true model':<24}{'9.81 (no error)':>28}"
                         + "".join(f"{'-' if ref.get(n) is None else format(ref[n], '.3g'):>22}" for n in names))
    return "\n".join(lines)
