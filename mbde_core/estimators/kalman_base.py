"""Common machinery of the independent-coordinate Kalman observers (x = [z, zd]).

Holds the mean x, covariance P (2g, 2g), the consistent full state (q, qd) used as the
next position-problem guess (which keeps the assembly branch), the plant noise (Van
Loan, :mod:`noise`) and the measurement bookkeeping shared by DEKF, UKF and CEKF.
"""
from __future__ import annotations

import numpy as np

from mbde_core.estimators.base import Estimator, InitialState
from mbde_core.estimators.noise import kinematic_plant_noise
from mbde_core.estimators.reduced import ReducedModel
from mbde_core.types import MechanismSnapshot


class ReducedKalman(Estimator):
    """Base of the [z, zd] observers."""

    def __init__(self, mech, sensors, config, rng=None):
        super().__init__(mech, sensors, config, rng)
        self.model = ReducedModel(mech, sensors)
        self.g = mech.dof
        self.x = np.zeros(2 * self.g)
        self.P = np.eye(2 * self.g)
        self.q = mech.q0.copy()
        self.qd = mech.qd0.copy()
        self.failures = 0
        self._Qd_cache = {}
        self._sigma = {k: float(v) ** 2 for k, v in (config.get("sensor_sigma") or {}).items()}

    # -- configuration -------------------------------------------------------------------------
    def plant_noise(self, dt: float) -> np.ndarray:
        if dt not in self._Qd_cache:
            pn = self.config["plant_noise"]
            self._Qd_cache[dt] = kinematic_plant_noise(self.g, dt, pn["acceleration_psd"], pn.get("velocity_psd", 0.0))
        return self._Qd_cache[dt]

    def measurement_covariance(self, names) -> np.ndarray:
        over = {n: np.full(self.sensors[n].dim, self._sigma[n]) for n in names if n in self._sigma}
        return self.model.covariance(names, over)

    # -- interface -----------------------------------------------------------------------------
    def reset(self, t: float, init: InitialState) -> None:
        self.t = float(t)
        g = self.g
        self.x = np.concatenate([np.asarray(init.z, float), np.asarray(init.zd, float)])
        self.P = np.diag(np.concatenate([np.broadcast_to(init.sigma_z, (g,)), np.broadcast_to(init.sigma_zd, (g,))]) ** 2)
        guess = self.mech.q0 if init.q_hint is None else np.asarray(init.q_hint, float)
        q, qd, ok = self.model.assemble(self.x, guess)
        if not ok:
            raise ValueError("the initial state cannot be assembled")
        self.q, self.qd = q, qd
        self.failures = 0

    def _assemble_into(self, x) -> bool:
        """Move the full state to x; on failure keep the previous one (counted)."""
        q, qd, ok = self.model.assemble(x, self.q)
        if ok and np.all(np.isfinite(q)) and np.all(np.isfinite(qd)):
            self.x = np.asarray(x, dtype=float)
            self.q, self.qd = q, qd
            return True
        self.failures += 1
        return False

    def extra_forces(self):
        """Extra generalized forces used by the model (estimated inputs); None by default."""
        return None

    def estimate(self) -> MechanismSnapshot:
        zdd, qdd = self.model.accelerations(self.t, self.q, self.qd, self.extra_forces())
        g = self.g
        return MechanismSnapshot(
            stamp=self.t, q=self.q.copy(), qd=self.qd.copy(), qdd=qdd,
            z=self.x[:g].copy(), zd=self.x[g:].copy(), zdd=zdd, cov=self.P.copy(),
        )

    def diagnostics(self) -> dict:
        return {"assembly_failures": self.failures}
