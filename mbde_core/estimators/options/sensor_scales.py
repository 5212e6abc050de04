"""Typical readings of the acceleration-dependent sensors, and how model errors show in them.

For the default-tuning rule (:mod:`~mbde_core.estimators.options.rule`): a sensor whose
reading depends on the accelerations (accelerometer, IMU) sees a model error directly:
gravity enters its prediction, and every unmodelled force changes zdd, which it reads.
Over the swept configurations of :mod:`mechanism_scales` (at rest and at the
characteristic speed v, with the model's accelerations) this module evaluates, per
channel, the RMS reading rms(h) and the RMS sensitivity to each independent
acceleration rms(dh/dzdd_k) (finite difference along qdd = R e_k), and widens the noise
of every channel that depends on the accelerations or reads gravity (nonzero at rest) to

    sigma^2 = sigma_noise^2 + (eps rms(h))^2 f / w_g + sum_k (rms(dh/dzdd_k) a_f,k)^2

for a relative model error eps and unknown-force accelerations a_f, a sensor read at
rate f. The error of the known forces is not white: it persists over their time scale
1/w_g, so f/w_g readings share it; a filter that took them as independent would average
it away and grow overconfident. As for the plant noise, the white-noise equivalent of an
error of variance s^2 and correlation time tau has density s^2 tau, i.e. variance
s^2 tau f per reading. The force limits are bounds, not typical values: their term is
taken per reading as it is. The other channels
(an IMU's gyroscope) keep their noise.
"""
from __future__ import annotations

import numpy as np

from mbde_core.engine import dynamics


def reading_scales(mech, sensor, sc, t: float = 0.0):
    """(rms h (d,), rms dh/dzdd (d, g)) over the swept configurations at rest and at speed v."""
    Q = sc.configurations
    rest = dynamics.evaluate(mech, t, Q, np.zeros_like(Q))
    qd = np.einsum("nij,j->ni", rest.R, sc.v)
    moving = dynamics.evaluate(mech, t, Q, qd)
    qs = np.vstack([Q, Q])
    qds = np.vstack([np.zeros_like(Q), qd])
    qdds = np.vstack([rest.qdd, moving.qdd])
    Rs = np.concatenate([rest.R, moving.R])
    h0 = sensor.h(qs, qds, qdds)
    sens = []
    for k in range(mech.dof):
        step = 1e-3 * max(float(np.max(np.abs(sc.a))), 1.0)
        h1 = sensor.h(qs, qds, qdds + step * Rs[:, :, k])
        sens.append(np.sqrt(np.mean(((h1 - h0) / step) ** 2, axis=0)))
    return np.sqrt(np.mean(h0**2, axis=0)), np.array(sens).T


def h_rest(mech, sensor, sc) -> np.ndarray:
    """Readings (K, d) at the swept configurations at rest (qd = qdd = 0): an
    accelerometer's channels read gravity there, a gyroscope's read 0."""
    Q = sc.configurations
    return sensor.h(Q, np.zeros_like(Q), np.zeros_like(Q))


def widened_sigmas(mech, sensors, names, sc, eps: float, gravity_only: bool = False, a_f=None) -> dict:
    """{sensor name: [sigma per channel]} for the named acceleration-reading sensors
    (module doc); gravity_only: only the error of the gravity term (readings at rest), for
    an estimator whose unknown inputs absorb the force errors (the ADE-KF, or an observer
    with an input state on every coordinate); a_f (g,): the unknown-force accelerations
    (default sc.a_f; 0 on the coordinates whose forces are input states)."""
    a_f = sc.a_f if a_f is None else np.asarray(a_f, float)
    out = {}
    for name in names:
        s = sensors[name]
        rms, dh = reading_scales(mech, s, sc)
        at_rest = np.sqrt(np.mean(h_rest(mech, s, sc) ** 2, axis=0))
        reads_acc = np.any(dh > 1e-9 * np.maximum(rms[:, None], 1.0), axis=1) | (at_rest > 1e-9)
        var = np.asarray(s.noise.variance(), float) * np.ones(s.dim)
        if gravity_only:
            extra = (eps * at_rest) ** 2 * s.rate / float(np.min(sc.w_g))
        else:
            extra = (eps * rms) ** 2 * s.rate / float(np.min(sc.w_g)) + (dh**2) @ (a_f**2)
        out[name] = [float(v) for v in np.sqrt(var + np.where(reads_acc, extra, 0.0))]
    return out
