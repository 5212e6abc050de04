"""Replay report: convergence time vs settled RMSE, branch identification, units and
consistency flags in the table (mbde_core.replay.convergence, replay.outputs)."""
import math

import numpy as np
import pytest

from mbde_core.replay.convergence import ANGLE_TOL, convergence_metrics, settle_time
from mbde_core.replay.outputs import summary_table


def test_settle_time():
    t = np.arange(6) * 0.1
    assert settle_time(t, np.array([0, 1, 0, 1, 1, 1], bool)) == pytest.approx(0.3)
    assert settle_time(t, np.ones(6, bool)) == 0.0
    assert settle_time(t, np.array([1, 1, 1, 1, 1, 0], bool)) is None


def test_convergence_splits_the_transient_from_tracking():
    t = np.arange(0, 2, 0.005)
    err = np.where(t < 0.1, 1.0, math.radians(0.1) * np.sin(40 * t))[:, None]  # rad: a 1 rad start-up error
    probs = np.column_stack([np.where(t < 0.08, 0.4, 0.999), np.where(t < 0.08, 0.6, 0.001)])
    m = convergence_metrics(t, err, [True], 1.0, probs, np.zeros(t.size, int))
    assert m["converged_after"] == pytest.approx(0.1, abs=0.006)
    assert m["rmse_settled"][0] == pytest.approx(math.radians(0.1) / math.sqrt(2), rel=0.05)
    assert m["branch_identified_after"] == pytest.approx(0.08, abs=0.006)
    whole = math.sqrt(np.mean(err**2))
    assert whole > 20 * m["rmse_settled"][0]  # what the whole-run RMSE hides
    lost = convergence_metrics(t, np.full((t.size, 1), 2 * ANGLE_TOL), [True], 1.0)
    assert lost["converged_after"] is None and "rmse_settled" not in lost


def test_summary_table_has_units_and_flags_values_outside_their_band():
    doc = {"units": {"z": ["rad"], "zd": ["rad/s"], "zdd": ["rad/s^2"]}, "estimators": {
        "pf": {"metrics": {"rmse": {"z": [0.1], "zd": [1.0], "zdd": [10.0]},
                           "convergence": {"converged_after": 0.085, "rmse_settled": [0.002],
                                           "branch_identified_after": 0.09},
                           "nees": {"mean": 0.6, "band_95": [1.8, 2.2]}, "nis": {"mean": 1.0, "band_95": [0.9, 1.1]},
                           "step_time_us": {"mean": 900.0}, "realtime_factor": 0.2, "counters": {"fused": 10}}}}}
    text = summary_table(doc)
    head = text.splitlines()[0]
    for col in ("RMSE z [rad]", "RMSE zd [rad/s]", "RMSE zdd [rad/s^2]", "converged [s]", "settled RMSE z [rad]",
                "branch [s]", "step [us]"):
        assert col in head
    row = text.splitlines()[1]
    assert "0.6 [1.80, 2.20] (!)" in row and "1 [0.90, 1.10]" in row and "1 [0.90, 1.10] (!)" not in row
    assert text.splitlines()[-1] == "(!) outside its 95 % consistency band"
    mixed = dict(doc, units={"z": ["rad", "m"], "zd": ["rad/s", "m/s"], "zdd": ["rad/s^2", "m/s^2"]})
    mixed["estimators"]["pf"]["metrics"]["rmse"]["z"] = [0.1, 0.02]
    assert "0.1 rad/0.02 m" in summary_table(mixed)


def test_streamed_convergence_equals_the_whole_series():
    from mbde_core.replay.convergence import ConvergenceMetrics

    rng = np.random.default_rng(3)
    t = np.arange(0, 3, 0.005)
    err = np.where(t < 0.4, rng.normal(0, 0.5, t.size), rng.normal(0, 0.005, t.size))[:, None]
    err[300] = 0.1  # one excursion after a first settling
    probs = np.column_stack([np.where(t < 0.2, 0.5, 0.995), np.where(t < 0.2, 0.5, 0.005)])
    whole = convergence_metrics(t, err, [True], 1.0, probs, np.zeros(t.size, int))
    acc = ConvergenceMetrics([True], 1.0)
    for k in range(0, t.size, 97):
        acc.add(t[k:k + 97], err[k:k + 97], probs[k:k + 97], np.zeros(len(t[k:k + 97]), int))
    got = acc.result()
    assert got["converged_after"] == pytest.approx(whole["converged_after"], abs=1e-12)
    assert got["rmse_settled"] == pytest.approx(whole["rmse_settled"], rel=1e-12)
    assert got["branch_identified_after"] == pytest.approx(whole["branch_identified_after"], abs=1e-12)
