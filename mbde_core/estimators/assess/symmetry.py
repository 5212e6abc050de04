"""Mirror ambiguity: can the readings tell a motion from its mirror image?

A planar linkage whose fixed points lie on one line L (and whose slider tracks lie on L
or cross it at right angles) can also move as its mirror image about L: reflect every
point, q_m = c + M (q - c) with M = 2 u u^T - I (c on L, u its direction), and every
angle coordinate, theta_m = 2 phi_L - theta (its rates change sign). The mirrored
configuration satisfies the same constraints when every body is symmetric about its own
axis (no point off the axis of a body with a rigid third point, checked through the
constraints Phi(q_m) = 0). Sensors that read only along L or distances along it (a slider
accelerometer along its track) give the same readings for both motions; gyroscopes
(omega -> -omega), encoders (theta -> -theta) and off-axis accelerometer channels tell
them apart.

The dynamics can still tell them apart: the mirrored motion obeys the model only if the
known forces are mirror symmetric too (gravity along L or none, symmetric mass
distributions), *unless* an unknown input acts on every independent coordinate (a motor
of unknown torque, paper 004's slider-crank: theta -> -theta with the torque
T_m = -T + 2 m g r cos theta gives the same slider accelerations), which explains any
acceleration.

:func:`mirror_ambiguity` tests this numerically at sampled states (configurations of the
rule's sweep, :mod:`mechanism_scales`, random seeded speeds and accelerations): the
mirror must be a configuration of the mechanism, every sensor's noise-free reading must be
equal to within 1e-6 of its noise sigma (or 1e-9 absolute), and, without an unknown input
on every coordinate, the model's accelerations at the mirrored state must be the mirrored
accelerations. Then no estimator can know the sign of the motion from the readings
alone: one that starts without knowing it (the particle filter's uniform start) ends on
either with equal chance, one that loses track may come back on the mirror (the two are
indistinguishable states in the sense of Hermann & Krener 1977, "Nonlinear controllability
and observability", IEEE TAC 22(5); here by a discrete symmetry of the whole output map).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mbde_core.engine import dynamics, kinematics
from mbde_core.estimators.options.mechanism_scales import mechanism_scales

SAMPLES = 12      # sampled states
READ_TOL = 1e-6   # of the sensor's noise sigma
ABS_TOL = 1e-9
GEOM_TOL = 1e-9   # constraint residual, relative to the squared length scale


@dataclass(frozen=True)
class Mirror:
    """The reflection about the line through ``c`` along ``u`` (module doc)."""

    c: np.ndarray
    u: np.ndarray

    @property
    def matrix(self) -> np.ndarray:
        ux, uy = self.u
        return np.array([[ux * ux - uy * uy, 2 * ux * uy], [2 * ux * uy, uy * uy - ux * ux]])

    @property
    def angle(self) -> float:
        return float(np.arctan2(self.u[1], self.u[0]))

    def apply(self, mech, q, qd=None, qdd=None):
        """Mirrored (q, qd, qdd) of (N, n) arrays (qd, qdd may be None)."""
        Mx = self.matrix
        nm = len(mech.moving_points)
        ang = np.asarray(mech.rel_columns, dtype=np.intp)

        def points(v, offset):
            out = np.array(v, dtype=float, copy=True)
            P = out[:, : 2 * nm].reshape(-1, nm, 2)
            if offset:
                P = (P - self.c) @ Mx.T + self.c
            else:
                P = P @ Mx.T
            out[:, : 2 * nm] = P.reshape(-1, 2 * nm)
            return out

        qm = points(q, True)
        qm[:, ang] = 2 * self.angle - np.asarray(q)[:, ang]
        out = [qm]
        for v in (qd, qdd):
            if v is None:
                out.append(None)
                continue
            vm = points(v, False)
            vm[:, ang] = -np.asarray(v)[:, ang]
            out.append(vm)
        return tuple(out)

    def describe(self) -> str:
        return f"the line through ({self.c[0]:g}, {self.c[1]:g}) along ({self.u[0]:.3g}, {self.u[1]:.3g})"


def candidate_lines(mech) -> list[Mirror]:
    """Lines that map the fixed points and slider tracks onto themselves (module doc)."""
    moving = set(int(i) for i in mech.moving_points)
    fixed = [i for i in range(mech.n_points) if i not in moving]
    xy = np.asarray(mech.fixed_xy, float)[fixed]
    dirs = []
    if len(xy) >= 2:
        d = xy - xy[0]
        k = int(np.argmax(np.hypot(d[:, 0], d[:, 1])))
        if np.hypot(*d[k]) > 0:
            dirs.append(d[k] / np.hypot(*d[k]))
    else:
        g = np.asarray(mech.gravity, float)
        if np.hypot(*g) > 0:
            dirs.append(g / np.hypot(*g))
        for s in mech.spec.sliders:
            dirs.append(np.asarray(s.direction, float) / np.hypot(*s.direction))
        dirs += [np.array([1.0, 0.0]), np.array([0.0, 1.0])]
    c = xy[0] if len(xy) else np.zeros(2)
    out = []
    scale = float(mech.length_scale)
    for u in dirs:
        n = np.array([-u[1], u[0]])
        if len(xy) and np.max(np.abs((xy - c) @ n)) > 1e-9 * scale:
            continue  # the fixed points are not collinear with this line
        if all(_track_kept(s, c, u, scale) for s in mech.spec.sliders):
            if not any(abs(abs(float(u @ m.u)) - 1) < 1e-12 for m in out):
                out.append(Mirror(np.asarray(c, float), np.asarray(u, float)))
    return out


def _track_kept(s, c, u, scale) -> bool:
    o, d = np.asarray(s.origin, float), np.asarray(s.direction, float)
    d = d / np.hypot(*d)
    n = np.array([-u[1], u[0]])
    along = abs(float(d @ n)) < 1e-12 and abs(float((o - c) @ n)) < 1e-9 * scale
    across = abs(float(d @ u)) < 1e-12
    return along or across


def sample_states(mech, rng, samples: int = SAMPLES):
    """(q, qd, qdd) (N, n): configurations of the rule's sweep with random rates."""

    sc = mechanism_scales(mech)
    Q = sc.configurations
    idx = rng.choice(len(Q), size=min(samples, len(Q)), replace=False)
    q = Q[np.sort(idx)]
    v = np.maximum(sc.v, 1.0 * sc.ell)
    zd = rng.normal(size=(len(q), mech.dof)) * v
    zdd = rng.normal(size=(len(q), mech.dof)) * np.maximum(sc.a, sc.ell)
    qd = kinematics.velocity(mech, q, zd)
    qdd = kinematics.acceleration(mech, q, qd, zdd)
    return q, qd, qdd


def mirror_ambiguity(mech, sensors, inputs_everywhere: bool, seed: int = 0) -> Mirror | None:
    """The mirror (module doc) that no reading of ``sensors`` tells apart, or None.
    inputs_everywhere: an unknown input acts on every independent coordinate (then the
    dynamics cannot tell the mirror apart either)."""
    if getattr(mech, "drivers", None) or not sensors:
        return None
    lines = candidate_lines(mech)
    if not lines:
        return None
    rng = np.random.default_rng(seed)
    try:
        q, qd, qdd = sample_states(mech, rng)
    except (ValueError, np.linalg.LinAlgError):
        return None
    for m in lines:
        if _indistinguishable(mech, sensors, m, q, qd, qdd, inputs_everywhere):
            return m
    return None


def _indistinguishable(mech, sensors, m, q, qd, qdd, inputs_everywhere) -> bool:

    qm, qdm, qddm = m.apply(mech, q, qd, qdd)
    scale2 = float(mech.length_scale) ** 2
    if not np.all(np.abs(mech.phi(qm)) < GEOM_TOL * max(scale2, 1.0)):
        return False
    with np.errstate(all="ignore"):
        for s in sensors:
            a, b = s.h(q, qd, qdd), s.h(qm, qdm, qddm)
            sig = np.sqrt(np.diag(np.atleast_2d(s.covariance())))
            if not np.all(np.abs(a - b) <= READ_TOL * sig + ABS_TOL * (1 + np.abs(a))):
                return False
        if inputs_everywhere:
            return True
        ev, evm = dynamics.evaluate(mech, 0.0, q, qd), dynamics.evaluate(mech, 0.0, qm, qdm)
        _, _, mirrored = m.apply(mech, q, None, np.asarray(ev.qdd))
        return bool(np.allclose(evm.qdd, mirrored, rtol=1e-8, atol=1e-9 * (1 + np.max(np.abs(ev.qdd)))))
