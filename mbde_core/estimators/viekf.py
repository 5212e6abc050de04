"""VI-EKF: the errorEKF with a variational prediction and its structured linearisation (paper 002 sec. 4).

The simulation of :class:`~mbde_core.estimators.errorekf.ErrorEKF` advances with a
variational integrator (``integrator``: ``midpoint``, paper 002's choice, or
``symplectic_euler``), and the covariance is propagated with the exact Jacobian of that
implicit step instead of the explicit-Euler transition F = [[I, dt I], [0, I]] (paper 003
eq. 13; or I + dt A(x), paper 002's "RK1" baseline)::

    P_k^- = F_k P_{k-1}^+ F_k^T + Sigma^P,    F_k = d(z1, zd1)/d(z0, zd0)

F_k comes from the implicit-function theorem on the reduced discrete Euler-Lagrange
residuals of the step just taken (:func:`mbde_core.engine.vi_linearize.step_jacobian`:
the step's Newton matrix A = R0^T (M - c_h dF/dq1) R1 and Mbar1, two g x g solves), so
it is the exact linearisation of the discrete map the prediction applies, symplectic in
(z, R^T M qd) (the "structured linearization" of paper 002 sec. 4.1). With
``estimate_acceleration`` / ``inputs`` the blocks of the offset a and inputs u are the
same theorem's derivative with respect to the step's extra force M R0 (a + B u), and the
z-columns gain that derivative times d(B u)/dz0 (:meth:`VIEKF._input_slope`: B = (R^T M R)^-1
R^T E changes with the configuration; without it dzd1/dz0 was 1670 instead of 1372 1/s^2 at
1 rad, 60 rad/s and 2 N m on the paper-004 slider-crank, against the continuous Jacobian).

Everything else (plant noise Sigma^P by Van Loan, update, error feedback, outputs) is the
errorEKF's. The option ``transition_jacobian`` of the other observers is not used.

When to use it (see the README): low filter rates (long steps) on lightly damped
mechanisms, where the Euler transition misjudges how the uncertainty rotates and
stretches over a step (paper 002 Fig. 4); at the paper 003 rate (5 ms) both agree.
Cost: a variational step (Newton on g unknowns) plus ~4 g small solves per prediction.
"""
from __future__ import annotations

import numpy as np

from mbde_core.engine import kinematics
from mbde_core.engine.integrators import MBState
from mbde_core.engine.vi_linearize import step_jacobian
from mbde_core.errors import ConfigError
from mbde_core.estimators.errorekf import ErrorEKF

VI_INTEGRATORS = ("midpoint", "symplectic_euler")
SLOPE_STEP = 1e-6  # [rad or m] central-difference step of the inputs' slope (_input_slope)


class VIEKF(ErrorEKF):
    name = "viekf"
    DEFAULTS = dict(ErrorEKF.DEFAULTS, integrator="midpoint", inputs=[], input_jump_nis=0.0)  # inputs: auto is opt-in (README)

    @staticmethod
    def validate_config(cfg, file, path):
        if cfg["integrator"] not in VI_INTEGRATORS:
            raise ConfigError(file, f"{path}.integrator", f"must be one of {', '.join(VI_INTEGRATORS)} (variational)")
        ErrorEKF.validate_config(cfg, file, path)

    def __init__(self, mech, sensors, config, rng=None):
        config = dict(config, transition_jacobian="simple")  # F is the structured one
        super().__init__(mech, sensors, config, rng)
        self.midpoint = config["integrator"] == "midpoint"
        self.linearisation_failures = 0

    def _predict_one(self, dt: float) -> None:
        g, na = self.g, self.na
        q0, qd0 = self.state.q, self.state.qd
        F, Qd = self._F_and_Q(dt, q0)  # Euler F (fallback) and Sigma^P
        extra = self._extra_zdd(q0) if (self.acc or self.k) else None
        new = self.integrator.step(self.mech, self.t, MBState(q0, qd0, self.state.qdd), dt, extra_zdd=extra)
        if (new.ok if isinstance(new.ok, bool) else new.ok.all()) and np.isfinite(new.q).all():
            try:
                Fx, Fa = step_jacobian(self.mech, self.t, dt, self.midpoint, q0, qd0, new.q, new.qd, extra)
            except np.linalg.LinAlgError:
                Fx = None
            if Fx is not None and np.isfinite(Fx).all() and np.isfinite(Fa).all():
                F = F.copy()
                F[: 2 * g, : 2 * g] = Fx
                if na:
                    F[: 2 * g, 2 * g : 2 * g + na] = Fa
                if self.k:
                    F[: 2 * g, 2 * g + na :] = Fa @ self.model.input_gain(q0, self.input_cols)
                    F[: 2 * g, :g] += Fa @ self._input_slope(q0)
            else:
                self.linearisation_failures += 1
            self.state = MBState(new.q, new.qd, new.qdd)
        else:
            self.failures += 1
            self.state = MBState(q0, qd0)
        self.t += dt
        self.full = None
        self.P = F @ self.P @ F.T + Qd
        self.P = 0.5 * (self.P + self.P.T)

    def _input_slope(self, q0) -> np.ndarray:
        """d(B(z) u)/dz (g, g) at q0: the inputs' accelerations change with the configuration
        (B = Mbar^-1 R^T E; on the paper-004 slider-crank ~270 rad/s^2 per rad and N m),
        which the step's extra acceleration, held over the step, does not show to
        :func:`step_jacobian`. Central differences over position problems at z0 +- SLOPE_STEP."""
        g = self.g
        z0 = q0[self.mech.independent]
        out = np.zeros((g, g))
        for l in range(g):
            acc = []
            for s in (1.0, -1.0):
                z = z0.copy()
                z[l] += s * SLOPE_STEP
                q, ok = kinematics.solve_position(self.mech, z, q0)
                if not ok:
                    return np.zeros((g, g))
                acc.append(self.model.input_gain(q, self.input_cols) @ self.u)
            out[:, l] = (acc[0] - acc[1]) / (2.0 * SLOPE_STEP)
        return out

    def diagnostics(self) -> dict:
        return {**super().diagnostics(), "linearisation_failures": self.linearisation_failures}
