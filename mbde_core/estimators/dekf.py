"""DEKF: discrete extended Kalman filter in independent coordinates (paper 003 sec. 3.1.2).

State x = [z, zd]. Prediction with forward Euler (eq. 12, ``transition: euler``)::

    z_k = z_{k-1} + dt zd_{k-1},   zd_k = zd_{k-1} + dt zdd_{k-1},   zdd = f(z, zd)  (eq. 3)

or (``transition: constant_acceleration``, :mod:`transition`) with
z_k = z_{k-1} + dt zd_{k-1} + dt^2/2 zdd_{k-1}, the exact solution for an acceleration
held over the step, or (``heun``, the default) with Heun's second stage at that
prediction (one more position problem and dynamics evaluation); then
    P_k^- = F P_{k-1}^+ F^T + Sigma^P                                            (eq. 11b)

with F = [[I, dt I], [0, I]] (eq. 13; ``transition_jacobian: full`` adds dt df/dx) and
Sigma^P the Van Loan discretisation of the acceleration noise density. Update
(eqs. 15a-e) with the chain-rule sensor Jacobian of :mod:`reduced`, then the position
and velocity problems bring q, qd to the corrected x.

Speed: zdd comes with the full state (computed with q, qd), the position problem after
the Euler step starts from the second-order predictor q + dt qd + dt^2/2 R'zd (the path
z + s zd, s in [0, dt]) and after a correction dz from q + R dz; F and Sigma^P are cached
per dt for the simple transition Jacobian.
"""
from __future__ import annotations

import numpy as np

from mbde_core.estimators.kalman import ekf_update
from mbde_core.estimators.kalman_base import ReducedKalman
from mbde_core.estimators.transition import TRANSITION_DEFAULT, heun_step, position_step


class DEKF(ReducedKalman):
    name = "dekf"
    DEFAULTS: dict = {"transition": "heun"}

    def __init__(self, mech, sensors, config, rng=None):
        super().__init__(mech, sensors, config, rng)
        self._F_cache = {}

    def _F(self, dt):
        """(F, Sigma^P) for the step dt."""
        mode = self.config["transition_jacobian"]
        if mode == "simple" and dt in self._F_cache:
            return self._F_cache[dt]
        g = self.g
        A = self.model.transition_jacobian(self.t, self.x, self.q, mode)
        out = (np.eye(2 * g) + dt * A, self.plant_noise(dt))
        if mode == "simple":
            self._F_cache[dt] = out
        return out

    def predict(self, dt: float) -> None:
        g = self.g
        st = self._full()
        F, Qd = self._F(dt)
        x = np.concatenate([position_step(self.config, self.x[:g], self.x[g:], st.zdd, dt), self.x[g:] + dt * st.zdd])
        if self.config.get("transition") == "heun":  # second stage at the predicted state
            st1, ok = self.model.solve_full(self.t + dt, x[:g], x[g:], self.q + dt * self.qd + (0.5 * dt * dt) * st.rd)
            if ok:
                x = heun_step(self.x[None], st.zdd[None], st1.zdd[None], dt, g)[0]
        self.P = F @ self.P @ F.T + Qd
        self.t += dt
        self._assemble_into(x, self.q + dt * self.qd + (0.5 * dt * dt) * st.rd)

    def update(self, measurements, gates=None):
        g = self.g
        names = [m.sensor for m in measurements]
        dims = [self.sensors[n].dim for n in names]
        o = np.concatenate([np.asarray(m.value, float) for m in measurements]) if len(measurements) > 1 \
            else np.asarray(measurements[0].value, float)
        st = self._full()
        pred, H, _ = self.model.linearize(names, self.t, st)
        y = self.model.residual(names, o, pred)
        R = self.measurement_covariance(names)
        dx, self.P, res = ekf_update(self.x, self.P, names, dims, y, H, R, gates)
        if res.accepted:
            self._assemble_into(self.x + dx, self.q + st.R @ dx[:g])
        return res
