"""Inverse dynamics along a prescribed trajectory of driven coordinates.

Given samples of the driven coordinates (as many as the degrees of freedom) at times t,
the velocities and accelerations are obtained by differentiating the samples, the full
motion (q, qd, qdd) by the position, velocity and acceleration problems with the driven
coordinates as independent coordinates, and the driver forces from
:func:`mbde_core.engine.dynamics.inverse`.

Differentiation: uniformly sampled data use a Savitzky-Golay filter (local quartic over
``window`` samples, exact for polynomials up to degree 4, and robust to the rounding of
printed data); non-uniform data use a cubic spline.
"""
from __future__ import annotations

import numpy as np
import scipy.interpolate
import scipy.signal

from mbde_core.engine import dynamics, kinematics
from mbde_core.errors import DataError


def differentiate(t: np.ndarray, x: np.ndarray, window: int = 11):
    """(x, xd, xdd) of samples x (K,) or (K, g) at times t (K,)."""
    t = np.asarray(t, dtype=float)
    x = np.asarray(x, dtype=float)
    if t.size < 5:
        raise DataError(f"need at least 5 trajectory samples, got {t.size}")
    dt = np.diff(t)
    if np.any(dt <= 0):
        raise DataError("trajectory times must increase strictly")
    if np.allclose(dt, dt.mean(), rtol=1e-6, atol=1e-12):
        h = float(dt.mean())
        w = min(window, t.size if t.size % 2 == 1 else t.size - 1)
        order = min(4, w - 1)
        xd = scipy.signal.savgol_filter(x, w, order, deriv=1, delta=h, axis=0, mode="interp")
        xdd = scipy.signal.savgol_filter(x, w, order, deriv=2, delta=h, axis=0, mode="interp")
        return x, xd, xdd
    spline = scipy.interpolate.CubicSpline(t, x, axis=0)
    return x, spline(t, 1), spline(t, 2)


def driver_forces(mech, t: np.ndarray, driven_values: np.ndarray, driven: list[int]):
    """Driver forces along a trajectory.

    mech: Mechanism; t: (K,); driven_values: (K,) or (K, g) samples of the driven
    coordinates ``driven`` (g indices into q, g = mech.dof).
    Returns (tau (K, g), q (K, n)). Raises DataError if the linkage cannot follow.
    """
    driven = [int(d) for d in driven]
    if len(driven) != mech.dof:
        raise DataError(f"the mechanism has {mech.dof} degree(s) of freedom: give the trajectory of {mech.dof} coordinate(s), got {len(driven)}")
    model = mech if list(mech.independent) == sorted(driven) and len(driven) == 1 else mech.with_independent(driven)
    order = [list(model.independent).index(d) for d in driven]
    x = np.asarray(driven_values, dtype=float).reshape(len(t), -1)
    z, zd, zdd = differentiate(t, x)
    K = len(t)
    tau = np.zeros((K, mech.dof))
    qs = np.zeros((K, model.n))
    q = model.q0.copy()
    for k in range(K):
        zk = np.empty(model.dof)
        zdk = np.empty(model.dof)
        zddk = np.empty(model.dof)
        zk[order], zdk[order], zddk[order] = z[k], zd[k], zdd[k]
        q, qd, qdd, ok = kinematics.full_state(model, q, zk, zdk, zddk)
        if not ok:
            raise DataError(f"the linkage cannot be assembled at t = {t[k]:g} s (driven coordinates {zk})")
        tau[k] = dynamics.inverse(model, float(t[k]), q, qd, qdd)[order]
        qs[k] = q
    return tau, qs
