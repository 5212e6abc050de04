"""Plausible-state box of the ADE-KF (``mbde bench faults``: stuck sensor, clock drift).

A lost ADE-KF has nothing that holds its state: the unknown inputs a are random walks
whose only anchor is the readings, and the slider-crank's zdd grows with zd^2
(centripetal terms), so a filter fed readings it cannot explain (an accelerometer stuck
at one value for 1 s) drove the torque to 1e3 N m, the crank speed to 8e6 rad/s, and the
forward-Euler step x+ = x + dt f(x) (whose zd^2 term squares the error every step) then
overflowed (|zd| 1e90, P_zd,zd 1e216, an OverflowError in the gate). Every estimate past
a few times the mechanism's own scales is a numerical artefact, not a motion, so after
every prediction and update the state is kept in the box (per component i, scales from
:mod:`mechanism_scales`, the ones the default tuning used when cached on the model):

- mean: |zd_i| <= SPEED_BOUND v_i (v: the characteristic speed, which includes a speed
  controller's target), |a_j| <= INPUT_BOUND s_a with s_a = max(sigma0_j, jump_sigma,
  max_i m_z,i a_i) (the inputs' own scales and the typical generalized force m_z a), and
  the input rates |b_j| <= INPUT_BOUND s_a w (w: the motion's frequency); a component
  outside is set to the bound, x_i <- x_i - c_i, and its variance raised to cover the
  move, P_ii <- max(P_ii, c_i^2) (adding diag(..) >= 0 keeps P positive semi-definite);
- covariance: standard deviations are capped, P <- D P D with
  D = diag(min(1, cap_i / sqrt(P_ii))) -- a congruence with a positive diagonal, so P stays
  symmetric positive semi-definite and its correlations are unchanged -- at pi for angles
  (a spread beyond the circle says nothing more), SPEED_BOUND ell for lengths (ell: the
  longest body), and at the mean bounds above for zd, a and b.

Inside the box nothing changes (a tracking filter never reaches it: 10 x the largest
speed and force), so this is a guard against overflow, counted in ``bounded`` of the
diagnostics; the stage's re-acquisition rule and multi-start bank find the mechanism again.
"""
from __future__ import annotations

import math

import numpy as np

from mbde_core.estimators.options.mechanism_scales import cached_scales

SPEED_BOUND = 10.0   # x the characteristic speed v
INPUT_BOUND = 10.0   # x the input scale s_a


def _scales(mech):
    """(v, m_z a, w, ell) (g,) of the model: the element-wise largest of the scales cached
    by the default tuning (with a scenario's motor), else those of the model alone."""

    cached = cached_scales(mech)
    v = np.max([np.asarray(s.v, float) for s in cached], axis=0)
    force = np.max([np.asarray(s.m_z * s.a, float) for s in cached], axis=0)
    w = np.max([np.asarray(s.w, float) for s in cached], axis=0)
    return np.maximum(v, 1e-6), force, w, np.asarray(cached[0].ell, float)


class StateBox:
    """Bounds (nx,) of the mean's magnitude and caps (nx,) of the standard deviations."""

    def __init__(self, mech, inputs, nx: int, jump_sigma: float):
        g, na = mech.dof, len(inputs)
        v, force, w, ell = _scales(mech)
        angular = np.isin(mech.independent, mech.rel_columns)
        s_a = max([float(s.sigma0) for s in inputs] + [float(jump_sigma), float(np.max(force, initial=0.0))])
        s_a = s_a if s_a > 0 else 1.0
        self.limit = np.full(nx, np.inf)
        self.limit[g : 2 * g] = SPEED_BOUND * v
        self.limit[2 * g : 2 * g + na] = INPUT_BOUND * s_a
        self.limit[2 * g + na :] = INPUT_BOUND * s_a * float(np.max(w))
        self.cap = self.limit.copy()
        self.cap[:g] = np.where(angular, math.pi, SPEED_BOUND * ell)
        self.cap2 = self.cap**2

    def apply(self, x: np.ndarray, P: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
        """(x, P, whether anything was bounded) kept in the box (module doc)."""
        if (np.abs(x) <= self.limit).all() and (np.diagonal(P) <= self.cap2).all():
            return x, P, False  # inside (the common case)
        moved = False
        over = np.abs(x) > self.limit
        if over.any():
            c = np.where(over, x - np.clip(x, -self.limit, self.limit), 0.0)
            x = x - c
            P = P.copy()
            idx = np.flatnonzero(over)
            P[idx, idx] = np.maximum(P[idx, idx], c[idx] ** 2)
            moved = True
        sd = np.sqrt(np.clip(np.diag(P), 0.0, None))
        if np.any(sd > self.cap):
            d = np.where(sd > self.cap, self.cap / np.where(sd > 0, sd, 1.0), 1.0)
            P = P * d[:, None] * d[None, :]
            moved = True
        return x, P, moved
