"""The model's own motion as an initial guess: a solved trajectory continued by simulation.

Used where readings alone may lead the solver to a wrong local minimum: the growing
horizon of :func:`mbde_core.identification.identify.identify`, the windowed smoother's
retry (:mod:`.windowed`) and the batch smoother's last-resort guess
(:func:`growing_guess`). No readings: RK4 on the model at the grid step (with the
inputs' accelerations if given).
"""
from __future__ import annotations

import numpy as np

from mbde_core.engine import kinematics
from mbde_core.engine.integrators import MBState, get_integrator


def extend(mech, X_prev, q_prev, N: int, dt: float, t0: float = 0.0, E=None, U=None):
    """(X0 (N, 3g), q0 (N, n)): a solved trajectory X_prev (M, 3g) with positions q_prev
    (M, n), its step 0 at time t0, continued to N steps by simulating the model from its
    last state (RK4 at the grid step); a failing step holds the last state. Inputs: the
    generalized forces U (N, m) on the coordinates of E (n, m) (known or held ones), as
    the accelerations G u they add, G = (R^T M R)^-1 R^T E at each step's start."""
    M, g = X_prev.shape[0], mech.dof
    X_prev = X_prev[:, :3 * g]
    if N <= M:
        return X_prev[:N].copy(), q_prev[:N].copy()
    X = np.empty((N, 3 * g))
    q = np.empty((N, mech.n))
    X[:M], q[:M] = X_prev, q_prev
    qd = kinematics.velocity(mech, q_prev[-1], X_prev[-1, g:2 * g])
    state = MBState(q_prev[-1].copy(), qd, None)
    integ = get_integrator("rk4")
    iz = mech.independent
    Mm = np.asarray(mech.M, dtype=float)
    for i in range(M, N):
        extra = None
        if E is not None and E.shape[1]:
            R = kinematics.r_matrix(mech, state.q[None])[0]
            extra = np.linalg.solve(R.T @ Mm @ R, R.T @ (E @ U[i - 1]))
        nxt = integ.step(mech, t0 + (i - 1) * dt, state, dt, extra_zdd=extra)
        if nxt.ok and np.all(np.isfinite(nxt.q)):
            state = nxt
        X[i] = np.concatenate([state.q[iz], state.qd[iz], (state.qdd if state.qdd is not None else np.zeros(mech.n))[iz]])
        q[i] = state.q
    return X, q


GROW_S = 1.0  # seconds added per solve of a growing horizon


def growing_guess(smoother, readings, init):
    """(X (N, b), q (N, n)): the run solved over a growing horizon from the initial state
    ``init`` alone (no forward filter): each GROW_S seconds more are guessed by the model's
    motion from the last solution (the inputs held at their last solved values, measured
    ones as read) and the longer horizon solved, until the whole run is. The guess of last
    resort when every forward filter led to a suspicious solution."""
    g, mech, ch = smoother.g, smoother.mech, smoother.inputs
    q0 = init.q_hint if init.q_hint is not None else mech.q0
    q0 = kinematics.solve_position(mech, np.asarray(init.z, float), np.asarray(q0, float))[0]
    X = np.concatenate([init.z, init.zd, np.zeros(g)])[None]
    q = q0[None]
    E = ch.matrix(mech.n) if ch.m else None
    measured = smoother.with_inputs(readings, np.zeros((readings.N, 3 * g)), np.tile(q0, (readings.N, 1)))[:, 3 * g:] \
        if ch.m else None
    chunk = max(int(round(GROW_S / smoother.dt)), 2)
    mean, sqrt_info = smoother.prior(init)
    while True:
        n = min(X.shape[0] + chunk, readings.N)
        U = None
        if ch.m:
            U = np.zeros((n, ch.m))
            last = X[-1, 3 * g:] if X.shape[1] > 3 * g else np.zeros(ch.m)
            U[:] = last
            for j in ch.sensors:  # measured inputs as read
                U[:, j] = measured[:n, j]
        Xn, qn = extend(mech, X, q, n, smoother.dt, float(readings.times[0]), E, U)
        if ch.m:
            Xn = np.hstack([Xn, U])
            Xn[:X.shape[0], 3 * g:] = X[:, 3 * g:] if X.shape[1] > 3 * g else U[:X.shape[0]]
        traj, res = smoother.solve(readings.window(0, n), Xn, qn, mean, sqrt_info, with_result=True)
        X, q = res.X, traj.q
        if n == readings.N:
            return X, q
