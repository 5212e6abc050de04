"""The acquisition rule (assess/acquisition.py): acquired = on track to the end, and at its
start confident (2 sigma within the cap) and on the true branch (P > 0.99)."""
import math

import numpy as np

from mbde_core.estimators.assess.acquisition import ANGLE_CAP, acquisition_metrics

T = np.arange(0, 2.0, 0.01)


def _errs(ez):
    ez = np.asarray(ez, float).reshape(len(T), 1)
    return {"z": ez, "zd": np.zeros_like(ez), "zdd": np.zeros_like(ez)}


def _run(ez, sd, p_true=None, **kw):
    bp = None if p_true is None else np.column_stack([p_true, 1.0 - np.asarray(p_true)])
    lab = None if p_true is None else np.zeros(len(T), int)
    return acquisition_metrics(T, _errs(ez), [True], 1.0, np.reshape(sd, (len(T), 1)), None, bp, lab, **kw)


def test_wide_cloud_within_its_own_sigma_is_not_acquired_until_confident():
    ez = np.full(len(T), 0.05)  # within the 10 deg cap all along
    sd = np.where(T < 0.5, 0.2, 0.01)  # a wide cloud (2 sigma = 0.4 rad > the cap), then narrow
    assert math.isclose(_run(ez, sd)["acquired_after"], 0.5, abs_tol=1e-9)
    # the rule without the confident start: acquired at the first step
    assert _run(ez, sd, confident=False)["acquired_after"] == 0.0


def test_the_branch_must_be_certain():
    ez, sd = np.full(len(T), 0.001), np.full(len(T), 0.002)
    p = np.where(T < 0.7, 0.9, 0.999)
    r = _run(ez, sd, p)
    assert math.isclose(r["acquired_after"], 0.7, abs_tol=1e-9)
    assert math.isclose(r["branch_identified_after"], 0.7, abs_tol=1e-9)
    assert _run(ez, sd, p, with_branch=False)["acquired_after"] == 0.0
    # a later doubt about the branch restarts the stretch
    p2 = np.where((T > 1.2) & (T < 1.3), 0.5, 0.999)
    assert math.isclose(_run(ez, sd, p2)["acquired_after"], 1.3, abs_tol=1e-9)


def test_sigma_growing_after_acquisition_is_not_a_loss():
    """A dead point: the estimate's sigma grows past the cap / 2 while its error stays within
    5 sigma (capped); acquired from the confident start, not restarted."""
    sd = np.where((T > 1.0) & (T < 1.2), 0.1, 0.005)
    ez = np.where((T > 1.0) & (T < 1.2), 0.9 * ANGLE_CAP, 0.001)
    assert _run(ez, sd)["acquired_after"] == 0.0


def test_an_error_beyond_the_tolerance_restarts_and_waits_for_confidence():
    ez = np.where((T > 0.8) & (T < 0.9), 0.5, 0.001)
    sd = np.where(T < 1.1, 0.1, 0.005)  # 2 sigma = 0.2 rad > the cap until 1.1 s
    assert math.isclose(_run(ez, sd)["acquired_after"], 1.1, abs_tol=1e-9)
