"""Replay report: acquisition time vs tracking figures, branch identification, a locked
offset, units and consistency flags in the table (estimators.assess.acquisition, replay.outputs)."""
import math

import numpy as np
import pytest

from mbde_core.estimators.assess.acquisition import ANGLE_FLOOR, SIGMAS, AcquisitionMetrics, acquisition_metrics
from mbde_core.replay.outputs import summary_table


def _errs(ez):
    return {"z": ez, "zd": np.zeros_like(ez), "zdd": np.zeros_like(ez)}


def test_acquisition_splits_the_transient_from_tracking():
    t = np.arange(0, 2, 0.005)
    sig = np.full((t.size, 1), math.radians(0.1))  # rad: the estimate's own sigma
    err = np.where(t < 0.1, 1.0, math.radians(0.1) * np.sin(40 * t))[:, None]  # rad: a 1 rad start-up error
    probs = np.column_stack([np.where(t < 0.08, 0.4, 0.999), np.where(t < 0.08, 0.6, 0.001)])
    nees = (err[:, 0] / sig[:, 0]) ** 2
    m = acquisition_metrics(t, _errs(err), [True], 1.0, sig, nees, probs, np.zeros(t.size, int))
    assert m["acquired_after"] == pytest.approx(0.1, abs=0.006)
    assert m["tracking"]["rmse"]["z"][0] == pytest.approx(math.radians(0.1) / math.sqrt(2), rel=0.05)
    assert m["tracking"]["nees"]["mean"] < 1.0  # rad^2/rad^2: the start-up's 1e8 not in it
    assert m["branch_identified_after"] == pytest.approx(0.08, abs=0.006)
    whole = math.sqrt(np.mean(err**2))
    assert whole > 20 * m["tracking"]["rmse"]["z"][0]  # what the whole-run RMSE hides
    lost = acquisition_metrics(t, _errs(np.full((t.size, 1), 0.1)), [True], 1.0, sig, np.full(t.size, 1e5))
    assert lost["acquired_after"] is None and "tracking" not in lost


def test_an_error_within_its_own_sigma_at_a_dead_point_is_tracking():
    """An error of 3 deg where the estimate's sigma is 1 deg (a dead point) is on track;
    the same error with a sigma of 0.2 deg (5 sigma: 1 deg) is a loss."""
    t = np.arange(0, 4, 0.005)
    err = np.full((t.size, 1), math.radians(0.1))
    dead = (t > 2.0) & (t < 2.2)
    err[dead] = math.radians(3.0)
    wide = np.where(dead, math.radians(1.0), math.radians(0.1))[:, None]
    m = acquisition_metrics(t, _errs(err), [True], 1.0, wide)
    assert m["acquired_after"] == 0.0
    narrow = np.full((t.size, 1), math.radians(0.2))
    m = acquisition_metrics(t, _errs(err), [True], 1.0, narrow)
    assert m["acquired_after"] == pytest.approx(2.2, abs=0.006)
    assert SIGMAS * math.radians(0.2) > ANGLE_FLOOR  # the floor did not decide


def test_a_locked_offset_is_flagged():
    """A constant -0.08 rad offset in both angles with sigma 0.01 rad for 3 s (NEES ~ 130):
    a lock from 1 s for 3 s; the same run without the offset has none."""
    rng = np.random.default_rng(4)
    t = np.arange(0, 6, 0.005)
    sig = np.full((t.size, 2), 0.01)
    err = rng.normal(0, 0.01, (t.size, 2))
    clean = acquisition_metrics(t, _errs(err), [True, True], 1.0, sig, np.sum((err / sig) ** 2, axis=1) * 2)
    assert clean["locked_offset"] is None
    err[(t >= 1.0) & (t < 4.0)] += -0.08
    nees = np.sum((err / sig) ** 2, axis=1) * 2  # z and (equal) zd errors: dof 4
    m = acquisition_metrics(t, _errs(err), [True, True], 1.0, sig, nees)
    lock = m["locked_offset"]
    assert lock["from"] == pytest.approx(1.0, abs=0.01) and lock["duration"] == pytest.approx(3.0, abs=0.01)
    assert lock["offset_z"] == pytest.approx([-0.08, -0.08], abs=0.002)  # rad
    assert lock["mean_nees"] > 100


def test_summary_table_has_units_and_flags_values_outside_their_band():
    tracking = {"rmse": {"z": [0.002], "zd": [0.02], "zdd": [0.3]},
                "nees": {"mean": 0.6, "band_95": [1.8, 2.2], "coverage_95": 0.99}}
    doc = {"units": {"z": ["rad"], "zd": ["rad/s"], "zdd": ["rad/s^2"]}, "estimators": {
        "pf": {"metrics": {"rmse": {"z": [0.1], "zd": [1.0], "zdd": [10.0]},
                           "convergence": {"acquired_after": 0.085, "tracking": tracking,
                                           "branch_identified_after": 0.09, "locked_offset": None},
                           "nees": {"mean": 1e5, "band_95": [1.8, 2.2]}, "nis": {"mean": 1.0, "band_95": [0.9, 1.1]},
                           "step_time_us": {"mean": 900.0}, "realtime_factor": 0.2, "counters": {"fused": 10}}}}}
    text = summary_table(doc)
    head = text.splitlines()[0]
    for col in ("acquired [s]", "branch [s]", "RMSE z [rad]", "RMSE zd [rad/s]", "RMSE zdd [rad/s^2]", "cover95",
                "whole-run RMSE z [rad]", "step [us]"):
        assert col in head
    row = text.splitlines()[1]
    assert "0.6 [1.80, 2.20] (u)" in row and "1 [0.90, 1.10]" in row and "1 [0.90, 1.10] (" not in row
    assert "0.085" in row and "0.002" in row and "0.99" in row and "1e+05" not in row  # tracking is the headline
    assert text.splitlines()[-1].startswith("(u) below its 95 % consistency band: underconfident")
    tracking["nees"]["mean"] = 3.0
    assert "3 [1.80, 2.20] (!)" in summary_table(doc)
    assert summary_table(doc).splitlines()[-1].startswith("(!) above its 95 % consistency band: overconfident")
    mixed = dict(doc, units={"z": ["rad", "m"], "zd": ["rad/s", "m/s"], "zdd": ["rad/s^2", "m/s^2"]})
    mixed["estimators"]["pf"]["metrics"]["rmse"]["z"] = [0.1, 0.02]
    assert "0.1 rad/0.02 m" in summary_table(mixed)
    tracking["nees"]["mean"] = 2.0
    doc["estimators"]["pf"]["metrics"]["convergence"]["locked_offset"] = {
        "from": 0.9, "duration": 9.0, "offset_z": [-0.08], "mean_nees": 100.0}
    text = summary_table(doc)
    assert "(lock)" in text.splitlines()[1] and "(!)" not in text and "(u)" not in text
    assert text.splitlines()[-1] == "(lock) pf: locked offset of -0.08 [rad] from 0.90 s for 9.00 s (mean NEES 100)"


def test_streamed_acquisition_equals_the_whole_series():
    rng = np.random.default_rng(3)
    t = np.arange(0, 3, 0.005)
    err = np.where(t < 0.4, rng.normal(0, 0.5, t.size), rng.normal(0, 0.005, t.size))[:, None]
    err[300] = 0.1  # one excursion after a first settling
    sig = np.full((t.size, 1), 0.005)
    nees = (err[:, 0] / sig[:, 0]) ** 2
    probs = np.column_stack([np.where(t < 0.2, 0.5, 0.995), np.where(t < 0.2, 0.5, 0.005)])
    whole = acquisition_metrics(t, _errs(err), [True], 1.0, sig, nees, probs, np.zeros(t.size, int))
    acc = AcquisitionMetrics([True], 1.0)
    for k in range(0, t.size, 97):
        sl = slice(k, k + 97)
        acc.add(t[sl], _errs(err[sl]), sig[sl], nees[sl], probs[sl], np.zeros(len(t[sl]), int))
    got = acc.result()
    assert got["acquired_after"] == pytest.approx(whole["acquired_after"], abs=1e-12)
    assert got["acquired_after"] == pytest.approx(t[301], abs=1e-12)
    assert got["tracking"]["rmse"]["z"] == pytest.approx(whole["tracking"]["rmse"]["z"], rel=1e-12)
    assert got["tracking"]["nees"]["mean"] == pytest.approx(whole["tracking"]["nees"]["mean"], rel=1e-12)
    assert got["branch_identified_after"] == pytest.approx(whole["branch_identified_after"], abs=1e-12)
