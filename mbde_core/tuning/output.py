"""What ``mbde tune`` prints and writes: the table of fit and held-out scores and the tuned config file.

The config file has one section per tuned estimator with explicit numbers for every
option the fit or the default-tuning rule set (step, plant noise, initial and sensor
sigmas, and the ADE-KF's input noise), so ``mbde replay --config`` and the estimator node
(``config_file``) run exactly what was chosen; options not written keep their defaults.
An estimator whose fitted options scored worse on the held-out readings than its start
gets the start's numbers (the decision is in the file's comments).

A particle filter's section holds its own step and ``acceleration_sigma``, fitted on its
own marginal likelihood (:mod:`~mbde_core.tuning.likelihood`); its sensor sigmas are left
alone (the PF widens them on purpose against sample impoverishment, paper 000 Table 1).
Its Gaussian follower (``refine``, :mod:`mbde_core.estimators.particle.refine`) becomes the
first tuned observer that can follow (not the ADE-KF) and has no input states, with that
observer's chosen options: the follower shares the cloud's model, where an unknown motor
is acceleration noise, so a density fitted with input states absorbing the motor would be
too small for it (the follower keeps its defaults then).
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
    """The YAML section of one tuned estimator (its chosen options: tuned, or the start's)."""
    cfg = result.chosen.as_dict()
    if _traits(result.name).noise_rule == "particle":
        sa = cfg.get("acceleration_sigma")
        return {"step": _plain(cfg["step"]),
                "acceleration_sigma": float(result.start_sigma_a if sa is None else sa)}
    out = {k: _plain(cfg[k]) for k in KEYS if k in cfg}
    pn = out.get("plant_noise")
    if isinstance(pn, dict) and not pn.get("adaptive", False):  # the fixed rule: no adaptive keys in the file
        out["plant_noise"] = {k: v for k, v in pn.items() if k not in ("adaptive", "adaptive_window")}
    if cfg.get("sensor_sigma"):
        out["sensor_sigma"] = _plain(cfg["sensor_sigma"])
    if _traits(result.name).noise_rule == "adekf":
        out.update({k: _plain(cfg[k]) for k in ADEKF_KEYS if k in cfg})
    elif isinstance(cfg.get("inputs"), list) and cfg["inputs"]:  # the rule's (or the user's) input states
        out["inputs"] = _plain(cfg["inputs"])
    return out


def pf_section(result, results) -> tuple[dict, str]:
    """(section, comment) of a tuned particle filter: its own fit (:func:`section`) and, if
    one was tuned, the first observer that can follow it as its ``refine`` (module doc)."""
    out = section(result)
    followers = [r for r in results if _traits(r.name).follower]
    follower = next((r for r in followers if not has_input_states(r)), None)
    note = ""
    if followers and follower is None:  # its density was fitted with input states the follower would not have
        note = (f"; its follower keeps its defaults: the tuned {followers[0].name} has input states, which the "
                "follower (the cloud's model) does not")
    if follower is not None:  # its Gaussian follower (pf_refine) runs as the tuned observer
        opts = {k: v for k, v in section(follower).items() if k != "step"}  # it steps with the PF
        out["refine"] = {"estimator": follower.name, "options": opts}
        note = f"; its follower (refine) is the {follower.name} of this file"
    return out, (f"{result.name}: acceleration_sigma fitted on its own marginal likelihood at its step "
                 f"{result.step:g} s{note}")


def has_input_states(result) -> bool:
    """Whether an observer's chosen options have input states (unknown forces as states)."""
    inputs = result.chosen.as_dict().get("inputs")
    return isinstance(inputs, (list, tuple)) and len(inputs) > 0


def verdict(r) -> str:
    """One line: what was fitted, the held-out comparison, the decision, an edge warning."""
    fs = ", ".join(f"{k} x {10 ** v:.3g}" for k, v in r.log_factors.items())
    if r.start_sigma_a is not None:
        sa = r.start_sigma_a * 10 ** (0.5 * r.log_factors["plant_noise"])
        fs += f" (acceleration_sigma {r.start_sigma_a:.4g} -> {sa:.4g})"
    line = f"{r.name} (step {r.step:g} s): fitted {fs}"
    if r.log_factors.get("plant_noise") == 0.0 and len(r.log_factors) == 1:
        line += "; the fit's optimum is the start itself: kept the starting options"
    elif r.held_start is not None:
        line += (f"; held-out log-likelihood per reading: start {_f(r.held_start.per_reading, 5)}, "
                 f"tuned {_f(r.held_tuned.per_reading, 5)}: ")
        line += "kept the tuned options" if r.decision == "tuned" else \
            "kept the starting options (they predict the held-out readings better)"
    lo, hi = r.searched
    if r.widened:
        line += f"; the optimum was at the edge of its grid, widened to x{10 ** lo:.3g}..x{10 ** hi:.3g}"
    q = r.log_factors.get("plant_noise", 0.0)
    if r.widened and q < lo + (hi - lo) / 2 and q < -3.0 and not r.edge:
        line += (f"; caution: x{10 ** q:.3g} is far below the start: the readings show almost no plant noise and "
                 "the filter will trust its model; its covariance may be too small where the readings do not reach "
                 "(e.g. velocities behind an encoder): check its NEES on a simulation of the linkage")
    if r.edge:
        line += (f"; warning: the optimum is still at the {r.edge} edge of the widened grid (x{10 ** (lo if r.edge == 'lower' else hi):.3g}): "
                 + ("the readings show no plant noise the model does not explain (an exact model?)" if r.edge == "lower"
                    else "the readings want more plant noise than searched (a large model error?)"))
    return line


def write_config(path: str, bag: str, window: float, results, split: float | None = None) -> None:
    """The tuned config file (module doc); split: the seconds of the window the fit used."""
    import yaml

    doc, notes = {}, []
    for r in results:
        if _traits(r.name).noise_rule == "particle":
            doc[r.name], note = pf_section(r, results)
            notes.append(note)
        else:
            doc[r.name] = section(r)
    part = f"the first {window:g} s" if split is None else \
        f"the first {split:g} s, judged on the next {window - split:g} s (held out)"
    head = [
        f"# mbde tune {bag}: noise fitted to the readings alone (no ground truth) by maximising their",
        f"# log-likelihood (prediction-error method, mbde_core/tuning/) over {part}.",
        "# Use: mbde replay BAG --config THIS_FILE ...;  live: the estimator node's config_file parameter.",
        "# Options not listed keep their defaults (config/estimators/default.yaml).",
    ]
    head += ["# " + verdict(r) for r in results] + ["# " + n for n in notes]
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(head) + "\n")
        yaml.safe_dump(doc, fh, sort_keys=False, default_flow_style=None, width=120)


def table(results) -> str:
    """Per estimator: its step, the fit part's NIS per channel and log-likelihood per reading
    (start -> optimum), the held-out log-likelihood per reading and NIS per channel (start,
    tuned), the factor, the decision."""
    cols = ["estimator", "step [s]", "fit NIS/dof", "fit loglik/reading", "held-out loglik start", "tuned",
            "held-out NIS/dof start", "tuned", "plant noise x", "decision", "evals", "CPU [s]"]
    rows = []
    for r in results:
        hs, ht = r.held_start, r.held_tuned
        q = _f(10 ** r.log_factors.get("plant_noise", 0.0)) + ("!" if r.edge else "")
        rows.append([r.name, f"{r.step:g}", f"{_f(r.before.nis_per_channel)} -> {_f(r.after.nis_per_channel)}",
                     f"{_f(r.before.per_reading, 5)} -> {_f(r.after.per_reading, 5)}",
                     _f(hs.per_reading if hs else None, 5), _f(ht.per_reading if ht else None, 5),
                     _f(hs.nis_per_channel if hs else None), _f(ht.nis_per_channel if ht else None), q,
                     "tuned" if r.decision == "tuned" else "start", str(r.evaluations), f"{r.cpu_s:.1f}"])
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
