"""What the default-tuning rule did to the sensors' sigmas, said in one line at the start of a run.

The rule (:mod:`~mbde_core.estimators.options.rule`, ``sensor_sigma``) widens every
channel of an acceleration-reading sensor that the user did not list, by the model's
error in predicting it: an accelerometer reads gravity and every unmodelled force
directly, so with the model error eps (``rule.model_error``) its prediction is off by
about eps x its typical reading, for as long as the configuration persists. A channel
widened far beyond its noise carries little information: the user should know it, and
how to keep it (list the sensor in ``sensor_sigma``, or lower ``rule.model_error`` when
the model is known better). :func:`widening` gives the channels and their sigmas,
:func:`widening_line` the sentence that ``mbde replay`` and the live node print.
"""
from __future__ import annotations

import numpy as np

from mbde_core.estimators.options.rule import _widened_sensors, model_error

NOTICE = 1.5  # a channel widened by more than this factor is named


def widening(cls, cfg: dict, resolved_sigmas: dict, sensors, mech=None) -> dict:
    """{sensor: {"channels": [...], "from": [...], "to": [...], "model_error": eps}} for
    the sensors the rule widened: cfg the validated options before the rule (``auto``
    values in), resolved_sigmas the resolved ``sensor_sigma``. Only channels widened by
    more than ``NOTICE`` x their noise are listed (an IMU's gyroscope keeps its noise).
    The particle filters widen their own (the class's ``own_sensor_sigmas``, given mech)."""
    out = {}
    own = getattr(cls, "own_sensor_sigmas", None)
    if own is not None and mech is not None:
        resolved_sigmas = own(cfg, mech, sensors)
        names = list(resolved_sigmas)
    else:
        names = _widened_sensors(cls, cfg, sensors)
    for name in names:
        s = sensors[name]
        to = np.atleast_1d(np.asarray((resolved_sigmas or {}).get(name, []), float))
        if to.size != s.dim:
            continue
        base = np.sqrt(np.asarray(s.noise.variance(), float) * np.ones(s.dim))
        keep = to > NOTICE * base
        if not keep.any():
            continue
        chans = list(getattr(s, "channels", []) or [f"{k}" for k in range(s.dim)])
        out[name] = {"channels": [c for c, k in zip(chans, keep) if k],
                     "from": [float(v) for v in base[keep]], "to": [float(v) for v in to[keep]],
                     "model_error": model_error(cfg)}
    return out


def widening_line(per_estimator: dict) -> str | None:
    """One sentence for {estimator: :func:`widening`}; None if nothing was widened.
    Estimators with the same widening share a clause."""
    groups: dict = {}
    for est, w in per_estimator.items():
        if not w:
            continue
        key = tuple((s, tuple(v["channels"]), tuple(round(x, 3) for x in v["to"])) for s, v in sorted(w.items()))
        groups.setdefault(key, ([], w))[0].append(est)
    if not groups:
        return None
    clauses = []
    eps = None
    for names, w in groups.values():
        parts = []
        for s, v in sorted(w.items()):
            eps = v["model_error"]
            unit = " m/s^2" if all(c.startswith("accel") for c in v["channels"]) else ""
            parts.append(f"{s} {'/'.join(v['channels'])} sigma {_span(v['from'])} -> {_span(v['to'])}{unit}")
        clauses.append(f"{', '.join(parts)} ({', '.join(names)})")
    return ("the default noise rule widened " + "; ".join(clauses)
            + f": accelerometers read gravity and every unmodelled force, which a model trusted to "
            f"{eps:g} (rule.model_error) predicts only that well, so these channels carry little "
            "information; to keep them, list the sensor in sensor_sigma (or, for the Kalman observers, lower "
            "rule.model_error)")


def _span(values) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.3g}" if np.isclose(lo, hi, rtol=0.005) else f"{lo:.3g}-{hi:.3g}"
