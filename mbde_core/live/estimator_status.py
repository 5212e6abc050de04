"""The ``estimator`` node's diagnostic status: one period's counters, rates, NIS, cost.

:func:`status` reads a :class:`~mbde_core.live.estimator.LiveEstimator` (its counters,
per-sensor statistics, the estimator's diagnostics) and the statistics of the period
that ends (:class:`Window`), and returns the ``diagnostic_msgs`` status the node
publishes on /diagnostics; the same values are what ``mbde replay`` counts in
metrics.json (the stage's counters).
"""
from __future__ import annotations

import math

import numpy as np

from mbde_core.live.diagnostics import ERROR, OK, WARN, Status, reading_problems, stamp_anomaly_values


class Window:
    """Statistics of one diagnostics period."""

    def __init__(self, now: float, counters: dict):
        self.start = now
        self.counters = dict(counters)
        self.nis_sum = 0.0
        self.nis_dof = 0
        self.updates = 0
        self.cost_sum = 0.0
        self.cost_max = 0.0
        self.steps = 0
        self.t_first = None
        self.t_last = None
        self.lag_min = math.inf
        self.resets = 0
        self.errors = 0
        self.frame_mismatch = 0


def status(core, name: str, now: float | None = None, extra_problems=()) -> Status:
    """The diagnostic status of the last period (and start a new period).

    name: status name (the node's); now: node clock [s]; extra_problems: [(level,
    text)] from the node (e.g. waiting for a topic, /clock missing).
    """
    wall = core.wall()
    w = core.window
    span = max(wall - w.start, 1e-9)
    c = core.counters.as_dict()
    d = {k: c[k] - w.counters.get(k, 0) for k in ("out_of_order", "non_finite", "rejected_gate",
                                                   "unknown_sensor", "resets", "gap_resets", "duplicates",
                                                   "future", "reacquisitions")}
    problems: list[tuple[int, str]] = list(extra_problems)
    if core.suitability.warning:
        problems.append((WARN, core.suitability.message))
    values = [("estimator", core.opt.name), ("mechanism", core.mech.name),
              ("suitability", core.suitability.level),
              ("model", core.scenario.name), ("independent coordinates", ", ".join(core.mech.independent_names)),
              ("filter step [s]", core.step)]
    t = core.time
    values.append(("filter time [s]", "-" if t is None else f"{t:.3f}"))
    if t is None:
        state = "waiting for readings"
    elif core.clock_mismatch:
        state = "running on readings only (clock mismatch)"
        problems.append((WARN, "clock mismatch: " + core.clock_hint()))
    elif now is not None and core.newest_arrival is not None and now - core.newest_arrival > max(
            core.opt.max_prediction, 2 * core.slowest_period):
        state = "stale"
        problems.append((WARN, f"stale: no reading for {now - core.newest_arrival:.2f} s"))
    else:
        state = "running"
    values.append(("state", state))
    rates = []
    for st in core.stats.values():
        n = sum(1 for a in st.arrivals if a >= w.start)
        rate = n / span
        rates.append(f"{st.name} {rate:.1f} Hz")
        values += [(f"{st.name}: topic", st.topic), (f"{st.name}: rate [Hz]", f"{rate:.1f}"),
                   (f"{st.name}: expected rate [Hz]", f"{st.expected_rate:.1f}"),
                   (f"{st.name}: received", st.received), (f"{st.name}: malformed", st.malformed),
                   (f"{st.name}: fused", c["per_sensor_fused"].get(st.name, 0)),
                   (f"{st.name}: rejected by gate", c["per_sensor_rejected"].get(st.name, 0)),
                   (f"{st.name}: frame mismatch", st.frame_mismatch)]
        if st.malformed and st.last_error:
            values.append((f"{st.name}: last malformed", st.last_error))
        if st.frame_mismatch:
            values.append((f"{st.name}: last frame", f"{st.last_frame!r} (expected {st.frame_id!r})"))
        st.arrivals = [a for a in st.arrivals if a >= wall - 1e-9]
    total_resets = sum(core.resets.values()) + c["resets"] + c["gap_resets"]
    breakdown = dict(core.resets)
    if c["resets"]:
        breakdown["backward stamp"] = c["resets"]
    if c["gap_resets"]:
        breakdown["gap"] = c["gap_resets"]
    values += [("readings received", c["received"]), ("readings fused", c["fused"]),
               ("late (out of order)", c["out_of_order"]), ("non-finite", c["non_finite"]),
               ("malformed", sum(st.malformed for st in core.stats.values())),
               ("rejected by gate", c["rejected_gate"]), ("unknown sensor", c["unknown_sensor"]),
               *stamp_anomaly_values(c),
               ("steps", c["steps"]), ("resets", total_resets),
               ("reset reasons", ", ".join(f"{k}: {v}" for k, v in sorted(breakdown.items())) or "-"),
               ("estimator errors", core.errors), ("non-finite estimates", core.non_finite_estimates),
               *core.backlog.values()]
    if core.last_error:
        values.append(("last estimator error", core.last_error))
    nis = None
    if w.updates and w.nis_dof:
        nis = w.nis_sum / w.updates
        core._recent["nis"] = [("NIS (mean, last active period)", f"{nis:.3f}"),
                               ("NIS expected (dof per update)", f"{w.nis_dof / w.updates:.3g}")]
    values += core._recent.get("nis", [])
    cloud = core.latest_cloud
    if cloud is None and core.latest is not None:
        try:
            cloud = core.est.particles()
        except Exception:
            cloud = None
    if cloud is not None:
        values += [("ESS", f"{cloud.ess:.1f}"), ("particles", len(cloud.weight)),
                   ("ESS / N", f"{cloud.ess / max(len(cloud.weight), 1):.3f}"),
                   ("unique particles", cloud.unique)]
    verdict = getattr(core.latest, "trust", None)
    if verdict is not None:  # the stage's verdict from the readings alone (estimators.stage.trust), as replay's
        values += [("trust", verdict.name), ("trust reason", verdict.reason)]
        if verdict.level:
            problems.append((ERROR if verdict.level == 2 else WARN, f"{verdict.name}: {verdict.reason}"))
    if core.latest is not None and core.latest.estimate.branch_probabilities is not None:
        probs = np.asarray(core.latest.estimate.branch_probabilities)
        values.append(("branch probabilities", " ".join(f"{k}: {p:.3f}" for k, p in enumerate(probs))))
        values.append(("branch", core.latest.estimate.branch))
    if w.steps:
        cost = [("step time mean [ms]", f"{1e3 * w.cost_sum / w.steps:.3f}"),
                ("step time max [ms]", f"{1e3 * w.cost_max:.3f}")]
        data_span = (w.t_last - w.t_first) + core.step if w.t_first is not None else 0.0
        if data_span > 0:
            cost.append(("real-time factor (cost / data time)", f"{w.cost_sum / data_span:.3f}"))
        core._recent["cost"] = cost
    values += core._recent.get("cost", [])
    if core.lag is not None:
        lag = w.lag_min if math.isfinite(w.lag_min) else core.lag
        values.append(("stamp lag [ms] (clock - stamp on arrival)", f"{1e3 * lag:.1f}"))
        if math.isfinite(w.lag_min):
            core.lag = w.lag_min  # follow slow drifts of the transport delay
    for k, v in sorted(core.est.diagnostics().items()):
        values.append((f"{core.opt.name}: {k}", v))
    values += [(f"published {k}", core.published[k]) for k in core.KEYS]
    problems += reading_problems(d)
    if d["unknown_sensor"]:
        problems.append((WARN, f"{d['unknown_sensor']} reading(s) of unknown sensors this period"))
    if w.frame_mismatch:
        problems.append((WARN, f"{w.frame_mismatch} reading(s) in another frame than the sensor's frame_id "
                               "this period"))
    if w.resets or d["resets"] or d["gap_resets"]:
        problems.append((WARN, "estimator reset this period"))
    if w.errors:
        problems.append((ERROR, f"{w.errors} estimator error(s) this period: {core.last_error}"))
    behind = core.backlog.problem()
    if behind:
        problems.append((WARN, behind))
    level = max([OK] + [lv for lv, _ in problems])
    if problems:
        message = "; ".join(text for lv, text in problems if lv == level)
    else:
        parts = [state] + (["trust OK"] if verdict is not None else []) + [", ".join(rates)]
        if nis is not None:
            parts.append(f"NIS {nis:.2f}")
        if cloud is not None:
            parts.append(f"ESS {cloud.ess:.0f}/{len(cloud.weight)}")
        if w.steps:
            parts.append(f"step {1e3 * w.cost_sum / w.steps:.2f} ms")
        message = ", ".join(parts)
    core.window = Window(wall, c)
    return Status(level, name, message, hardware_id=core.mech.name, values=values)
