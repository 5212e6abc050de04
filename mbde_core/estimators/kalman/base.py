"""Common machinery of the independent-coordinate Kalman observers (x = [z, zd], or
[z, zd, u] with input states, :mod:`input_states`: x[2g:] and the rows and columns of P
after 2g are then the inputs').

Holds the mean x, covariance P (2g, 2g), the consistent full state (q, qd) used as the
next position-problem guess (which keeps the assembly branch), the plant noise (Van
Loan, :mod:`noise`) and the measurement bookkeeping shared by DEKF, UKF and CEKF.
The full state is kept as a :class:`~mbde_core.estimators.kalman.reduced.FullState`: with q and
qd come, from the same kernel call, the accelerations (reported by ``estimate`` and used
by the next prediction), R and R'zd (predictors for the next position problems, the
measurement Jacobian).
"""
from __future__ import annotations

import numpy as np

from mbde_core.estimators.base import CovarianceInflation, Estimator, InitialState, sensor_variances
from mbde_core.estimators.kalman.reduced import FullState, ReducedModel
from mbde_core.estimators.kalman.second_order import second_order_terms
from mbde_core.types import MechanismSnapshot


class ReducedKalman(CovarianceInflation, Estimator):
    """Base of the [z, zd] observers."""

    combines_readings = True  # a sensor faster than the step: one reading per slot (stage.multirate)

    def __init__(self, mech, sensors, options, rng=None):
        super().__init__(mech, sensors, options, rng)
        self.model = ReducedModel(mech, sensors)
        self.g = mech.dof
        self.x = np.zeros(2 * self.g)
        self.P = np.eye(2 * self.g)
        self.q = mech.q0.copy()
        self.qd = mech.qd0.copy()
        self.full: FullState | None = None
        self.failures = 0
        self.k = 0  # input states (InputStates)
        self._sigma = sensor_variances(options)

    # -- configuration -------------------------------------------------------------------------
    def measurement_covariance(self, names) -> np.ndarray:
        """Measurement covariance of the named readings (cached per list of names, read-only)."""
        return self.model.noise_covariance(names, self._sigma)

    def second_order(self, names, pred, R, H=None):
        """(pred, R) with the Gaussian second-order filter's terms of the readings at the
        prediction (``measurement_order: 2``, :mod:`second_order`): the predicted readings
        + 1/2 tr(T_i P), the measurement covariance + 1/2 tr(T_i P T_l P) (over [z, zd]);
        unchanged for ``measurement_order: 1`` (paper 003's EKF), with input states (terms
        over [z, zd] alone miss the inputs' mixed derivatives: the DEKF with ``inputs: auto``
        on adekf_slider_crank went from RMSE 0.033 to 0.31 rad with them, README) or where
        the position problem of a difference step fails. H: the readings' Jacobian at the
        prediction, if the caller has it (the base point of the differences)."""
        if int(self.options.measurement_order) != 2 or self.k:
            return pred, R
        g2 = 2 * self.g
        terms = second_order_terms(self.model, names, self.t, self.x[:g2], self.q, self.P[:g2, :g2], H0=H)
        if terms is None:
            return pred, R
        return pred + terms[0], R + terms[1]

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
        self.full = None
        self.failures = 0

    def rebase(self, t: float) -> None:
        super().rebase(t)
        self.full = None  # its accelerations were evaluated at the old time

    def _full(self) -> FullState:
        """The FullState of (self.q, self.qd) at self.t (evaluated when first needed)."""
        if self.full is None:
            self.full = self.model.full_state_at(self.t, self.q, self.qd)
        return self.full

    def _assemble_into(self, x, guess=None, st=None) -> bool:
        """Move the full state to x at the current time (position problem from ``guess``,
        default the current q; st: x's FullState at the current time if the caller has
        evaluated it); on failure keep the previous one (counted)."""
        x = np.asarray(x, dtype=float)
        g = self.g
        ok = st is not None
        if not ok:
            st, ok = self.model.solve_full(self.t, x[:g], x[g : 2 * g], self.q if guess is None else guess)
        if ok and np.isfinite(st.q).all() and np.isfinite(st.qd).all():
            self.x = x
            self.q, self.qd, self.full = st.q, st.qd, st
            return True
        self.failures += 1
        self.full = None  # the kept state's accelerations belong to the previous time
        return False

    def extra_forces(self):
        """Extra generalized forces used by the model (estimated inputs); None by default."""
        return None

    def estimate(self) -> MechanismSnapshot:
        if self.extra_forces() is None:
            st = self._full()
            zdd, qdd = st.zdd.copy(), st.qdd.copy()
        else:
            zdd, qdd = self.model.accelerations(self.t, self.q, self.qd, self.extra_forces())
        g = self.g
        return MechanismSnapshot(
            stamp=self.t, q=self.q.copy(), qd=self.qd.copy(), qdd=qdd,
            z=self.x[:g].copy(), zd=self.x[g : 2 * g].copy(), zdd=zdd, cov=self.P[: 2 * g, : 2 * g].copy(),
        )

    def diagnostics(self) -> dict:
        return {"assembly_failures": self.failures}
