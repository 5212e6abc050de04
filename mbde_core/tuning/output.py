"""What ``mbde tune`` prints and writes: the before/after table and the tuned config file.

The config file has one section per tuned estimator with explicit numbers for every
option the fit or the default-tuning rule set (step, plant noise, initial and sensor
sigmas, and the ADE-KF's input noise), so ``mbde replay --config`` and the estimator node
(``config_file``) run exactly what was fitted; options not written keep their defaults.

The particle filter has no Gaussian innovations, so no innovation likelihood: its
``acceleration_sigma`` is written as the Kalman-tuned density's equivalent for its own
step, sigma_a = sqrt(q / dt_pf) (the PF adds N(0, sigma_a^2) to zdd over each step, whose
density is sigma_a^2 dt, :mod:`mbde_core.estimators.particle.filter`), from the first tuned Kalman
observer (the largest coordinate's q); its sensor sigmas are left alone (the PF widens
them on purpose against sample impoverishment, paper 000 Table 1). Its Gaussian follower
(``refine``, :mod:`mbde_core.estimators.particle.refine`) becomes the first tuned observer that
can follow (not the ADE-KF), with that observer's tuned options.
"""
from __future__ import annotations

import math

import numpy as np

from mbde_core.estimators.registry import traits

KEYS = ("step", "plant_noise", "initial_sigma", "transition", "integrator")
ADEKF_KEYS = ("r_a", "jump_sigma", "inputs")  # the ADE-KF family's options the default-tuning rule resolves


def _traits(name: str):
    return traits(name)


def section(result) -> dict:
    """The YAML section of one tuned Kalman observer."""
    cfg = result.tuned.as_dict()
    out = {k: _plain(cfg[k]) for k in KEYS if k in cfg}
    if cfg.get("sensor_sigma"):
        out["sensor_sigma"] = _plain(cfg["sensor_sigma"])
    if _traits(result.name).noise_rule == "adekf":
        out.update({k: _plain(cfg[k]) for k in ADEKF_KEYS if k in cfg})
    elif isinstance(cfg.get("inputs"), list) and cfg["inputs"]:  # the rule's (or the user's) input states
        out["inputs"] = _plain(cfg["inputs"])
    return out


def pf_step(cfg) -> float:
    """The PF's step [s] (its configured number, in its validated options; 5 ms if it has none)."""
    step = cfg.get("step")
    return float(step) if isinstance(step, (int, float)) and not isinstance(step, bool) else 0.005


def pf_section(results, pf_step: float, name: str = "pf") -> tuple[dict, str]:
    """(section, comment) of particle filter ``name`` from the first tuned Kalman observer
    that can follow it (its traits' ``follower``; module doc)."""
    src = next((r for r in results if _traits(r.name).follower), results[0] if results else None)
    if src is None:
        return {}, f"no Kalman observer was tuned: the {name} keeps its defaults"
    q = float(np.max(np.atleast_1d(src.tuned.plant_noise.acceleration_psd)))
    sigma = math.sqrt(q / pf_step)
    out = {"acceleration_sigma": sigma}
    note = ""
    follower = next((r for r in results if _traits(r.name).follower), None)
    if follower is not None:  # its Gaussian follower (pf_refine) runs as the tuned observer
        opts = {k: v for k, v in section(follower).items() if k != "step"}  # it steps with the PF
        out["refine"] = {"estimator": follower.name, "options": opts}
        note = f"; its follower (refine) is the tuned {follower.name}"
    return (out, f"{name}: acceleration_sigma = sqrt(q / step) = sqrt({q:.4g} / {pf_step:g}) from the tuned {src.name} "
                 f"(the PF has no Gaussian innovations; its sensor sigmas are left alone){note}")


def write_config(path: str, bag: str, window: float, results, pf: dict | None = None) -> None:
    """The tuned config file; pf: {particle filter name: (section, comment)} (:func:`pf_section`)."""
    import yaml

    doc = {r.name: section(r) for r in results}
    for name, (sec, _) in (pf or {}).items():
        if sec:
            doc[name] = sec
    head = [
        f"# mbde tune {bag}: noise fitted to the readings alone (no ground truth) by maximising the",
        f"# innovation log-likelihood (prediction-error method, mbde_core/tuning/), over the first {window:g} s.",
        "# Use: mbde replay BAG --config THIS_FILE ...;  live: the estimator node's config_file parameter.",
        "# Options not listed keep their defaults (config/estimators/default.yaml).",
    ]
    for r in results:
        fs = ", ".join(f"{k} x {10 ** v:.3g}" for k, v in r.log_factors.items())
        head.append(f"# {r.name}: {fs}; log-likelihood {r.before.per_reading:.4f} -> {r.after.per_reading:.4f} "
                    f"per reading, NIS/dof {r.before.nis_per_channel:.3g} -> {r.after.nis_per_channel:.3g}")
    for _, note in (pf or {}).values():
        head.append("# " + note)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(head) + "\n")
        yaml.safe_dump(doc, fh, sort_keys=False, default_flow_style=None, width=120)


def table(results) -> str:
    """Before/after per estimator: NIS per channel, log-likelihood per reading, factors."""
    cols = ["estimator", "NIS/dof before", "after", "loglik/reading before", "after", "plant noise x", "evals", "CPU [s]"]
    rows = []
    for r in results:
        rows.append([r.name, _f(r.before.nis_per_channel), _f(r.after.nis_per_channel), _f(r.before.per_reading, 5),
                     _f(r.after.per_reading, 5), _f(10 ** r.log_factors.get("plant_noise", 0.0)), str(r.evaluations),
                     f"{r.cpu_s:.1f}"])
    w = [max(len(c), *(len(row[i]) for row in rows)) if rows else len(c) for i, c in enumerate(cols)]
    line = lambda vals: "  ".join(v.ljust(w[i]) if i == 0 else v.rjust(w[i]) for i, v in enumerate(vals))  # noqa: E731
    return "\n".join([line(cols)] + [line(r) for r in rows])


def _f(v, digits: int = 3) -> str:
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{digits}g}"


def _plain(v):
    """numpy -> plain Python for YAML."""
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, np.ndarray)):
        return [_plain(x) for x in v]
    if isinstance(v, (np.floating, float)):
        return float(v)
    if isinstance(v, (np.integer,)):
        return int(v)
    return v
