"""VI-EKF: the errorEKF with a variational prediction and its structured linearisation (paper 002 sec. 4).

The simulation of :class:`~mbde_core.estimators.kalman.errorekf.ErrorEKF` advances with a
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
``estimate_acceleration`` the offset a enters the step as the extra force M R0 a, its
block is the same theorem's derivative with respect to a. The ``inputs`` u enter as the
generalized forces they are, fe = E u held over the step (``extra_force`` of
:func:`mbde_core.engine.variational.run`; E the unit columns of their coordinates), and
their block is d(z1, zd1)/du from dPhi1/du = -c_h R0^T E, dPhi2/du = -c_p R1^T E. Taken
instead as the acceleration B(z0) u = Mbar0^-1 R0^T E u held over the step (as the explicit
integrators take them), i.e. as the force M R0 B(z0) u, which the momentum at q1 sees as
R1^T M R0 Mbar0^-1 R0^T E u instead of R1^T E u, they give on the paper-004 slider-crank at
60 rad/s and 2 N m a zd drift of -1.1e-3 rad/s per 1 ms step against a fine RK4 reference
(as forces: -1.4e-5; RK4 with the held acceleration: -2.8e-4), the size of the plant noise,
and F misses d(B u)/dz0 (20 % of dzd1/dz0).

Inputs (``inputs: auto``, ``input_jump_nis: 16``: the errorEKF's defaults, :mod:`input_states`)
and ``structured`` (without_inputs | always | never): with estimated inputs the exact step Jacobian
is that of the open-loop plant with the input held, while a random-walk input usually
stands for a driver that reacts to the state (a speed controller supplies the holding
torque: its dzd'/dzd is the controller's damping, not the open loop's -2 Gamma(z) zd,
+-20 1/s twice per turn at 60 rad/s on the paper-004 slider-crank). The default
``without_inputs`` therefore
keeps the structured [z, zd] block without inputs and takes paper 003's Euler block
(``transition_jacobian: simple``) with them, the inputs' block Fu staying the exact one.
Measured on ``adekf_slider_crank`` (one slider accelerometer, 5 N m speed-controlled motor):
structured mean NEES 17.2, RMSE 0.0163 rad, z biased by +0.02 rad and zd by +0.8 rad/s
at 60 rad/s; Euler block NEES 0.71, RMSE 0.0056; structured without the dzd'/dzd term
0.85 / 0.0063 (the damping term is the culprit). The errorEKF agrees: ``transition_jacobian:
full`` there 1.33 (RK4) / 8.99 (midpoint) against 0.88 with its simple default.

Everything else (plant noise Sigma^P by Van Loan, update, error feedback, outputs) is the
errorEKF's. The option ``transition_jacobian`` of the other observers is not used.

When to use it (see the README): low filter rates (long steps) on lightly damped
mechanisms, where the Euler transition misjudges how the uncertainty rotates and
stretches over a step (paper 002 Fig. 4); at the paper 003 rate (5 ms) both agree.
Cost: a variational step (Newton on g unknowns) plus ~4 g small solves per prediction.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mbde_core.engine.integrators import MBState
from mbde_core.engine.vi_linearize import step_jacobian
from mbde_core.errors import ConfigError
from mbde_core.estimators.kalman.errorekf import ErrorEKF, ErrorEKFOptions
from mbde_core.estimators.traits import KALMAN_TUNABLE, Traits

VI_INTEGRATORS = ("midpoint", "symplectic_euler")
STRUCTURED = ("without_inputs", "always", "never")


@dataclass(frozen=True)
class VIEKFOptions(ErrorEKFOptions):
    """The errorEKF's options with a variational integrator and the structured Jacobian."""

    integrator: str = "midpoint"           # midpoint | symplectic_euler (variational only)
    # the step's exact Jacobian for [z, zd] without estimated inputs only, the Euler block
    # with them (module doc, "Inputs") | always | never
    structured: str = "without_inputs"


class VIEKF(ErrorEKF):
    name = "viekf"
    traits = Traits(tunable=KALMAN_TUNABLE, input_states=True, known_inputs=True, follower=True)
    Options = VIEKFOptions

    @classmethod
    def validate_config(cls, cfg, file, path):
        if cfg["integrator"] not in VI_INTEGRATORS:
            raise ConfigError(file, f"{path}.integrator", f"must be one of {', '.join(VI_INTEGRATORS)} (variational)")
        if cfg["structured"] not in STRUCTURED:
            raise ConfigError(file, f"{path}.structured", f"must be one of {', '.join(STRUCTURED)}, got {cfg['structured']!r}")
        super().validate_config(cfg, file, path)

    def __init__(self, mech, sensors, options, rng=None):
        options = options.replace(transition_jacobian="simple")  # F is the structured one
        super().__init__(mech, sensors, options, rng)
        structured = options.structured
        self.structured = (not self.k) if structured == STRUCTURED[0] else structured == "always"
        self.midpoint = options.integrator == "midpoint"
        self.linearisation_failures = 0

    def _predict_one(self, dt: float) -> None:
        g, na = self.g, self.na
        q0, qd0 = self.state.q, self.state.qd
        F, Qd = self._F_and_Q(dt, q0)  # Euler F (fallback) and Sigma^P
        offset = self.a.copy() if self.acc else None  # the acceleration offset, as M R0 a
        force = self._extra_Q()  # the inputs, as the generalized forces E u they are
        new = self.integrator.step(self.mech, self.t, MBState(q0, qd0, self.state.qdd), dt,
                                   extra_zdd=offset, extra_force=force)
        if (new.ok if isinstance(new.ok, bool) else new.ok.all()) and np.isfinite(new.q).all():
            try:
                Fx, Fa, Fu = step_jacobian(self.mech, self.t, dt, self.midpoint, q0, qd0, new.q, new.qd,
                                           offset, force, self._E)
            except np.linalg.LinAlgError:
                Fx = None
            if Fx is not None and np.isfinite(Fx).all() and np.isfinite(Fa).all() and np.isfinite(Fu).all():
                F = F.copy()
                if self.structured:  # else the Euler block of _F_and_Q
                    F[: 2 * g, : 2 * g] = Fx
                if na:
                    F[: 2 * g, 2 * g : 2 * g + na] = Fa
                if self.k:
                    F[: 2 * g, 2 * g + na :] = Fu
            else:
                self.linearisation_failures += 1
            self.state = MBState(new.q, new.qd, new.qdd)
        else:
            self.failures += 1
            self.state = MBState(q0, qd0)
        self.advance_clock(dt)
        self.full = None
        self.P = F @ self.P @ F.T + Qd
        self.P = 0.5 * (self.P + self.P.T)

    def diagnostics(self) -> dict:
        return {**super().diagnostics(), "linearisation_failures": self.linearisation_failures}
