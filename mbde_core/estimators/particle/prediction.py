"""The cloud's predictions of a reading at the particles' state and the noise Jacobians of
the adapted proposal (:mod:`.likelihood`, :mod:`.weights`), their per-particle numpy code
run on the propagation's threads (:func:`mbde_core.engine.thread_pools.rows`: contiguous
ranges of particles, each computed from its own rows alone, so the values do not depend on
the thread count; numpy releases the GIL in its loops).

- :func:`accelerations`: qdd = R (f + v + B u) + R' zd of every particle (paper 000 eq. 11
  with the drawn noise), for readings of accelerations;
- :func:`predict_at_state`: h(q, qd, qdd) (N, d) and, while the step's noise is pending,
  G = dh/dv (N, d, g) (:func:`mbde_core.estimators.particle.proposal.noise_jacobian`: exact
  directional differences, the readings being linear in qd and qdd) in one pass per range;
- :func:`r_columns`: the columns of R from the integrator's context, memoised per q.
"""
from __future__ import annotations

import numpy as np

from mbde_core.engine import kinematics, thread_pools
from mbde_core.estimators.particle import compiled as pf_compiled
from mbde_core.estimators.particle import proposal as prop
from mbde_core.sensors.gyroscope import Gyroscope


def accelerations(pf):
    """qdd of every particle including its acceleration noise and its inputs'
    accelerations (:mod:`.inputs`): R (f + v + B u) + R'zd.

    Memoised on the identity of the particle arrays and the time (the readings and the
    proposal of one update both need it; the arrays are replaced, never edited in place)."""
    ins = getattr(pf, "inputs", None)
    key = (pf.q, pf.qd, pf.qdd, pf.v, pf.t) + ((ins.U, ins.K) if ins else ())
    memo = pf._acc_memo
    if memo is not None and len(memo[0]) == len(key) and all(a is b for a, b in zip(memo[0][:4], key[:4])) \
            and memo[0][4] == key[4] and all(a is b for a, b in zip(memo[0][5:], key[5:])):
        return memo[1]
    zdd = pf.qdd[:, pf.iz] + pf.accel_noise
    out = np.empty(pf.q.shape)

    def run(lo, hi):
        out[lo:hi] = kinematics.acceleration(pf.mech, pf.q[lo:hi], pf.qd[lo:hi], zdd[lo:hi], t=pf.t)

    thread_pools.rows(run, pf.N, pf.propagator.threads, ns_per_row=60.0)  # 60-95 ns a particle (four-bar, double pendulum)
    pf._acc_memo = (key, out)
    return out


def h_memo(pf) -> dict:
    """The sensors' ``h_many`` memo at the current q (emptied when q is replaced)."""
    memo = pf.__dict__.get("_h_memo_q")
    if memo is None or memo[0] is not pf.q:
        memo = pf._h_memo_q = (pf.q, {})
    return memo[1]


def will_propose(pf) -> bool:
    """Whether the update's adapted proposal draws the step's noise now (it then needs each
    reading's noise Jacobian G, :func:`noise_jacobian`)."""
    return bool(pf.adapted and pf.sigma_a > 0 and not pf._propose)


def predict_at_state(pf, s, qdd, with_G: bool):
    """(h (N, d), G (N, d, g) or None) of sensor s at the particles' state: the prediction
    (``s.h_many``) and, if ``with_G`` and the proposal draws noise now, its noise Jacobian
    (:func:`noise_jacobian`), both per particle on the propagation's threads
    (:func:`mbde_core.engine.thread_pools.rows`: each range with its own ``h_many`` memo;
    a row depends on its own particle alone, so the values are those of one pass); a
    gyroscope from 4096 particles (any N once the propagation runs compiled) in one compiled
    pass (:func:`.compiled.gyroscope`, the same
    formulas, equal to rounding)."""
    N = pf.N
    q, qd = pf.q, pf.qd
    with_G = with_G and pf.adapted and pf.sigma_a > 0
    if type(s) is Gyroscope and pf_compiled.for_set(pf) and q.dtype == qd.dtype == np.float64:
        Rc = r_columns(pf) if with_G else None  # a gyroscope in one compiled pass (any thread count)
        return pf_compiled.gyroscope(s, q, qd, Rc, pf._pending or 0.0, pf.propagator.threads)
    if N < thread_pools.ROWS_MIN or pf.propagator.threads < 2:
        pred = s.h_many(q, [(qd, qdd)], h_memo(pf))[0]
        return pred, (noise_jacobian(pf, s, qdd, pred) if with_G else None)
    dt = pf._pending or 0.0
    Rc = r_columns(pf) if with_G else None
    pred = np.empty((N, s.dim))
    G = np.empty((N, s.dim, Rc.shape[0])) if with_G else None

    def run(lo, hi):
        sl, memo = slice(lo, hi), {}
        pred[sl] = s.h_many(q[sl], [(qd[sl], qdd[sl])], memo)[0]
        if with_G:
            G[sl] = prop.noise_jacobian(s, q[sl], qd[sl], qdd[sl], Rc[:, sl], dt, pred[sl], memo)

    thread_pools.rows(run, N, pf.propagator.threads, ns_per_row=150.0)  # 150-310 ns a particle (IMU readings)
    return pred, G


def noise_jacobian(pf, s, qdd, h0):
    """G (N, d, g) of sensor s for the step's pending noise (proposal.noise_jacobian),
    or None when the proposal draws no noise now. The columns R of the current particle
    arrays are memoised with them."""
    dt = pf._pending or 0.0
    if not (pf.adapted and pf.sigma_a > 0):
        return None
    return prop.noise_jacobian(s, pf.q, pf.qd, qdd, r_columns(pf), dt, h0, h_memo(pf))


def r_columns(pf):
    """prop.r_columns at the current particles (memoised on the identity of q)."""
    memo = pf.__dict__.get("_rc_memo")
    if memo is None or memo[0] is not pf.q:
        memo = pf._rc_memo = (pf.q, prop.r_columns(pf.mech, pf.q, pf._aux, threads=pf.propagator.threads))
    return memo[1]
