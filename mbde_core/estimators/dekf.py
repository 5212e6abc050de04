"""DEKF: discrete extended Kalman filter in independent coordinates (paper 003 sec. 3.1.2).

State x = [z, zd]. Prediction with forward Euler (eq. 12)::

    z_k = z_{k-1} + dt zd_{k-1},   zd_k = zd_{k-1} + dt zdd_{k-1},   zdd = f(z, zd)  (eq. 3)
    P_k^- = F P_{k-1}^+ F^T + Sigma^P                                            (eq. 11b)

with F = [[I, dt I], [0, I]] (eq. 13; ``transition_jacobian: full`` adds dt df/dx) and
Sigma^P the Van Loan discretisation of the acceleration noise density. Update
(eqs. 15a-e) with the chain-rule sensor Jacobian of :mod:`reduced`, then the position
and velocity problems bring q, qd to the corrected x.
"""
from __future__ import annotations

import numpy as np

from mbde_core.estimators.kalman import ekf_update
from mbde_core.estimators.kalman_base import ReducedKalman


class DEKF(ReducedKalman):
    name = "dekf"
    DEFAULTS: dict = {}

    def predict(self, dt: float) -> None:
        g = self.g
        zdd, _ = self.model.accelerations(self.t, self.q, self.qd)
        A = self.model.transition_jacobian(self.t, self.x, self.q, self.config["transition_jacobian"])
        F = np.eye(2 * g) + dt * A
        x = np.concatenate([self.x[:g] + dt * self.x[g:], self.x[g:] + dt * zdd])
        self.P = F @ self.P @ F.T + self.plant_noise(dt)
        self.t += dt
        self._assemble_into(x)

    def update(self, measurements, gates=None):
        names = [m.sensor for m in measurements]
        dims = [self.sensors[n].dim for n in names]
        o = np.concatenate([np.asarray(m.value, float) for m in measurements])
        qdd = None
        if self.sensors.uses_qdd(names):
            qdd = self.model.accelerations(self.t, self.q, self.qd)[1]
        pred = self.model.predict_measurements(names, self.q, self.qd, qdd)
        y = self.model.residual(names, o, pred)
        H = self.model.measurement_jacobian(names, self.t, self.q, self.qd, qdd)
        R = self.measurement_covariance(names)
        dx, self.P, res = ekf_update(self.x, self.P, names, dims, y, H, R, gates)
        if res.accepted:
            self._assemble_into(self.x + dx)
        return res
