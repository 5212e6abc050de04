"""Characteristic accelerations, speeds and time scales of a mechanism (for default tuning).

The default plant noise, filter step and initial sigmas of the observers
(:mod:`~mbde_core.estimators.options.rule`) are built from these numbers, computed from the
estimator's model alone (no data):

- configurations: each independent coordinate swept through one turn (angles) or
  +- one length scale (lengths) from the model's initial configuration, the others held,
  by continuation (small steps of the position problem, so every sample stays on the
  initial assembly branch); a sweep stops where the linkage cannot be assembled (the
  limits of a non-Grashof crank);
- a_g (g,): the RMS over those configurations of the generalized acceleration at rest
  produced by the known forces (gravity and the model's loads),
  zdd = (R^T M R)^-1 R^T Q (paper 003 eq. 3 with zd = 0), per coordinate;
- a_f (g,): force limits (motors, hands: generalized forces the model does not know,
  bounded by ``force_limits`` [N or N m] per coordinate) over the typical reduced mass
  m_z = median diag(R^T M R): a_f = F_max / m_z;
- v (g,): the characteristic speed: the speed at which the kinetic energy 1/2 m_z v^2
  equals the range of the potential energy over the configurations (what the linkage
  reaches falling under gravity from rest), or a given speed (a speed controller's
  target, the initial speed) if larger;
- a_v (g,): the RMS of the velocity-dependent accelerations -(R^T M R)^-1 R^T M R'zd at
  zd = v (centripetal and Coriolis terms);
- f_r (g,): the RMS rate [N m/s or N/s] of the holding force, the generalized force
  tau(z) = -(R^T M R) zdd(z, v) that keeps the linkage at speed v against the known forces
  and the velocity terms (what a speed-controlled motor supplies, its ripple: twice per
  turn on a slider-crank), along each coordinate's own sweep, d tau_k/dt = v_k d tau_k/dz_k
  by finite differences between neighbouring samples (the input states' density, :mod:`noise_rule`);
- a = sqrt(a_g^2 + a_v^2 + a_f^2): the typical size of zdd;
- ell (g,): the unit of motion, 1 rad for angles, the longest body for lengths;
- w_g = sqrt(a_g / ell) [1/s]: the pendulum frequency of the known forces (the time
  scale of a model error proportional to them); w = a / v [1/s]: the frequency of the
  motion (both floored at 0.1 rad/s for linkages without known forces).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mbde_core.engine import dynamics, kinematics

SAMPLES = 72       # configurations per turn of one coordinate
SUBSTEPS = 4       # continuation steps between samples
W_FLOOR = 0.1      # 1/s: lowest frequency (a linkage with no known forces)


@dataclass(frozen=True)
class MechanismScales:
    """See the module docstring; every array is (g,) in the units of z."""

    a_g: np.ndarray
    a_v: np.ndarray
    a_f: np.ndarray
    v: np.ndarray
    m_z: np.ndarray
    ell: np.ndarray
    f_r: np.ndarray
    samples: int
    configurations: np.ndarray  # (K, n) the swept configurations (for sensor scales)

    @property
    def a(self) -> np.ndarray:
        return np.sqrt(self.a_g**2 + self.a_v**2 + self.a_f**2)

    @property
    def w_g(self) -> np.ndarray:
        return np.maximum(np.sqrt(self.a_g / self.ell), W_FLOOR)

    @property
    def w(self) -> np.ndarray:
        return np.maximum(self.a / np.maximum(self.v, 1e-12), W_FLOOR)


def sweep(mech, samples: int = SAMPLES, t: float = 0.0, runs: list | None = None) -> np.ndarray:
    """Configurations (K, n): q0 and each independent coordinate swept from it (module doc).
    ``runs``, if given, receives one (k, dz, rows) per sweep: coordinate k, step dz, and
    the rows of the returned array, in order from q0 (row 0)."""
    angle = np.isin(mech.independent, mech.rel_columns)
    z0 = mech.q0[mech.independent]
    out = [mech.q0.copy()]
    for k in range(mech.dof):
        span = 2 * np.pi if angle[k] else 2 * mech.length_scale
        for sign in (1.0, -1.0):
            q = mech.q0.copy()
            rows = [0]
            for i in range(samples // 2 * SUBSTEPS):
                z = z0.copy()
                z[k] += sign * span * (i + 1) / (samples * SUBSTEPS)
                q_new, ok = kinematics.solve_position(mech, z, q, t=t)
                if not ok or not np.all(np.isfinite(q_new)):
                    break
                q = q_new
                if (i + 1) % SUBSTEPS == 0:
                    rows.append(len(out))
                    out.append(q.copy())
            if runs is not None:
                runs.append((k, sign * span / samples, rows))
    return np.array(out)


def holding_force_rate(runs, tau, v) -> np.ndarray:
    """f_r (g,) (module doc): the RMS over each coordinate's sweeps of v_k d tau_k/dz_k, tau
    (K, g) the holding forces at the swept configurations (0 where a sweep has one sample)."""
    g = tau.shape[1]
    sq, count = np.zeros(g), np.zeros(g)
    for k, dz, rows in runs:
        if len(rows) > 1:
            rate = v[k] * np.diff(tau[rows, k]) / dz
            sq[k] += float(rate @ rate)
            count[k] += rate.size
    return np.sqrt(sq / np.maximum(count, 1))


def mechanism_scales(mech, force_limits=None, speed=None, t: float = 0.0) -> MechanismScales:
    """Scales of ``mech`` (module doc). force_limits: (g,) bounds of unknown generalized
    forces on the independent coordinates [N, N m] (None: none); speed: (g,) a speed the
    linkage is known to reach (e.g. a speed controller's target) [unit/s]. Cached on the
    mechanism per (force_limits, speed)."""
    g = mech.dof
    fl = np.zeros(g) if force_limits is None else np.broadcast_to(np.asarray(force_limits, float), (g,)).copy()
    sp = np.zeros(g) if speed is None else np.broadcast_to(np.abs(np.asarray(speed, float)), (g,)).copy()
    key = (tuple(fl.tolist()), tuple(sp.tolist()), float(t))
    cache = mech.__dict__.setdefault("_scales_cache", {})
    if key in cache:
        return cache[key]
    runs: list = []
    Q = sweep(mech, t=t, runs=runs)
    rest = dynamics.evaluate(mech, t, Q, np.zeros_like(Q))
    a_g = np.sqrt(np.mean(rest.zdd**2, axis=0))
    m_z = np.median(np.einsum("nii->ni", rest.Mbar), axis=0)
    V = mech.potential_energy(Q)
    dV = float(np.max(V) - np.min(V)) if len(Q) else 0.0
    v = np.maximum(np.sqrt(2.0 * max(dV, 0.0) / m_z), sp)
    if np.any(v > 0):
        moving = dynamics.evaluate(mech, t, Q, np.einsum("nij,j->ni", rest.R, v))
        a_v = np.sqrt(np.mean((moving.zdd - rest.zdd) ** 2, axis=0))
        f_r = holding_force_rate(runs, -np.einsum("kij,kj->ki", rest.Mbar, moving.zdd), v)
    else:
        a_v = f_r = np.zeros(g)
    angle = np.isin(mech.independent, mech.rel_columns)
    ell = np.where(angle, 1.0, float(mech.length_scale))
    out = MechanismScales(a_g, a_v, fl / m_z, v, m_z, ell, f_r, len(Q), Q)
    cache[key] = out
    return out


def cached_scales(mech) -> list:
    """The scales computed for ``mech`` so far (:func:`mechanism_scales` caches them on the
    model per force limits and speed: the default tuning's, with a scenario's motor), in
    the order computed; [the scales of the model alone] if none yet."""
    return list(mech.__dict__.get("_scales_cache", {}).values()) or [mechanism_scales(mech)]
