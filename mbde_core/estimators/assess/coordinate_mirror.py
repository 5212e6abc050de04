"""Coordinate mirrors: a reflection of the driven angle that the readings cannot see.

:mod:`symmetry` finds mirror images of the *whole* linkage. A sensor that sees only part
of it can be blind to a smaller symmetry: on issue 42's offset slider-crank a gyroscope on
the rod reads phi_dot, and the rod angle phi(theta) = asin((e - L1 sin theta) / L2) is the
same at theta and pi - theta, so the crank turning one way, theta(t), and the other way
from the mirrored angle, theta_m(t) = pi - theta(t), give identical gyro readings
(phi'(pi - theta) (-theta_dot) = phi'(theta) theta_dot); the slider, which the
gyroscope does not see, moves differently. The model's forces tell the two apart only if
no unknown force can make the mirrored motion: with a motor of unknown torque within a
declared limit on the coordinate, the mirrored motion needs the torque

    T_m = ID(q_m, qd_m, qdd_m),   q_m from z_m = 2 alpha - z, qd_m, qdd_m with z rates reversed,

(ID: inverse dynamics); where that is within the limit for most *unforced* motions of the
model (qdd from the dynamics without the motor: T = 0; the median over sampled states at
the rule's speeds), the motor explains the mirror.
From a start on the mirror's fixed line (z0 = alpha at rest: paper 004's and issue 42's
pi/2 start) an observer then follows either motion with equal chance.

:func:`coordinate_mirror` tests the reflections z -> 2 alpha - z of the independent angle
coordinates about alpha in {0, pi/2} numerically at the states of the rule's sweep
(:mod:`~mbde_core.estimators.options.mechanism_scales`; the mirrored configuration is
assembled from the sweep's nearest one, on the same branch), with the tolerance of
:mod:`symmetry`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mbde_core.engine import dynamics, kinematics
from mbde_core.estimators.assess.symmetry import ABS_TOL, READ_TOL
from mbde_core.estimators.options.mechanism_scales import mechanism_scales

ALPHAS = (0.0, math.pi / 2)
SAMPLES = 12


@dataclass(frozen=True)
class CoordinateMirror:
    """z -> 2 alpha - z on the independent angles (rates reversed); ``torque``: the median
    force [N or N m] per coordinate that the mirrored unforced motions need."""

    alpha: float
    torque: np.ndarray

    def describe(self, mech) -> str:
        a = "pi" if abs(self.alpha - math.pi / 2) < 1e-12 else f"{2 * self.alpha:g}"
        return ", ".join(f"{n} -> {a} - {n}" for n in mech.independent_names)

    def fixed(self, z0, zd0, tol: float = 0.05) -> bool:
        """Whether the state (z0, zd0) is (nearly) its own mirror: z0 = alpha (mod pi), at rest."""
        d = np.angle(np.exp(1j * (np.asarray(z0, float) - self.alpha)))
        return bool(np.all(np.abs(d) < tol) and np.all(np.abs(np.asarray(zd0, float)) < 1e-3))


def coordinate_mirror(mech, sensors, limits, seed: int = 0) -> CoordinateMirror | None:
    """The coordinate mirror (module doc) that ``sensors`` cannot see and that unknown forces
    within ``limits`` (g,) explain, or None."""
    if getattr(mech, "drivers", None) or not len(sensors) or limits is None:
        return None
    limits = np.asarray(limits, float)
    if not np.all(limits > 0) or not np.all(np.isin(mech.independent, mech.rel_columns)):
        return None  # an unknown force on every coordinate, all of them angles
    sc = mechanism_scales(mech)
    Q = np.asarray(sc.configurations, float)
    rng = np.random.default_rng(seed)
    q = Q[np.sort(rng.choice(len(Q), size=min(SAMPLES, len(Q)), replace=False))]
    zd = rng.normal(size=(len(q), mech.dof)) * np.maximum(sc.v, 1.0 * sc.ell)
    with np.errstate(all="ignore"):
        try:
            qd = kinematics.velocity(mech, q, zd)
            zdd = dynamics.forward(mech, 0.0, q, qd)[0]  # unforced
            qdd = kinematics.acceleration(mech, q, qd, zdd)
        except (ValueError, np.linalg.LinAlgError):
            return None
        for alpha in ALPHAS:
            m = _mirrored(mech, sensors, Q, q, qd, qdd, zd, zdd, alpha)
            if m is not None and np.all(m <= limits):
                return CoordinateMirror(alpha, m)
    return None


def _mirrored(mech, sensors, Q, q, qd, qdd, zd, zdd, alpha):
    """The median |T_m| (g,) of the mirrored samples, or None if a reading differs."""
    iz = mech.independent
    zm = 2 * alpha - q[:, iz]
    ZQ = Q[:, iz]
    near = np.argmin(np.sum(np.abs(np.angle(np.exp(1j * (ZQ[None, :, :] - zm[:, None, :])))), axis=2), axis=1)
    guess = Q[near].copy()
    guess[:, iz] = zm
    qm, ok = kinematics.solve_position(mech, zm, guess)
    if not np.all(ok):
        return None
    qdm = kinematics.velocity(mech, qm, -zd)
    qddm = kinematics.acceleration(mech, qm, qdm, -zdd)
    for s in sensors:
        a, b = s.h(q, qd, qdd), s.h(qm, qdm, qddm)
        sig = np.sqrt(np.diag(np.atleast_2d(s.covariance())))
        if not np.all(np.abs(a - b) <= READ_TOL * sig + ABS_TOL * (1 + np.abs(a))):
            return None
    T = np.array([dynamics.inverse(mech, 0.0, qm[i], qdm[i], qddm[i]) for i in range(len(qm))])
    return np.median(np.abs(T), axis=0)
