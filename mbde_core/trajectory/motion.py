"""The model's own motion as an initial guess: a solved trajectory continued by simulation.

Used where readings alone may lead the solver to a wrong local minimum: the growing
horizon of :func:`mbde_core.identification.identify.identify` and the windowed
smoother's retry (:mod:`.windowed`). No readings: RK4 on the model at the grid step.
"""
from __future__ import annotations

import numpy as np

from mbde_core.engine import kinematics
from mbde_core.engine.integrators import MBState, get_integrator


def extend(mech, X_prev, q_prev, N: int, dt: float, t0: float = 0.0):
    """(X0 (N, 3g), q0 (N, n)): a solved trajectory X_prev (M, 3g) with positions q_prev
    (M, n), its step 0 at time t0, continued to N steps by simulating the model from its
    last state (RK4 at the grid step); a failing step holds the last state."""
    M, g = X_prev.shape[0], mech.dof
    if N <= M:
        return X_prev[:N].copy(), q_prev[:N].copy()
    X = np.empty((N, 3 * g))
    q = np.empty((N, mech.n))
    X[:M], q[:M] = X_prev, q_prev
    qd = kinematics.velocity(mech, q_prev[-1], X_prev[-1, g:2 * g])
    state = MBState(q_prev[-1].copy(), qd, None)
    integ = get_integrator("rk4")
    iz = mech.independent
    for i in range(M, N):
        nxt = integ.step(mech, t0 + (i - 1) * dt, state, dt)
        if nxt.ok and np.all(np.isfinite(nxt.q)):
            state = nxt
        X[i] = np.concatenate([state.q[iz], state.qd[iz], (state.qdd if state.qdd is not None else np.zeros(mech.n))[iz]])
        q[i] = state.q
    return X, q
