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
and velocity problems bring q, qd to the corrected x. With ``measurement_order: 2`` (the
default; paper 003's eqs. are order 1) the predicted readings and S gain
the Gaussian second-order filter's terms (:mod:`second_order`): on ``pf_sim`` the first
order lost the crank at a turning point for q >= 16 (the rule's 8.2 kept it by 1.5x), the
second order keeps it at 50.

Speed: zdd comes with the full state (computed with q, qd), the position problem after
the Euler step starts from the second-order predictor q + dt qd + dt^2/2 R'zd (the path
z + s zd, s in [0, dt]) and after a correction dz from q + R dz; F and Sigma^P are cached
per dt for the simple transition Jacobian.

Inputs (option ``inputs``, :mod:`input_states`): x = [z, zd, u], zdd = f + B(z) u
(B from the R of the state the model evaluated, no second dynamics evaluation), F gains
the input columns dz+/du = dt^2/2 B (0 for ``transition: euler``), dzd+/du = dt B and
u+ = u; accelerometers see the inputs through dh/du = dh/dqdd R B, and dh/d[z, zd] is
taken with the inputs applied (``extra_Q``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mbde_core.estimators.kalman.input_states import InputStates, input_jump, jump_directions, project_inputs
from mbde_core.estimators.kalman.jump_hypothesis import JumpHypothesis
from mbde_core.estimators.kalman.algebra import ekf_update, reading_noise
from mbde_core.estimators.kalman.base import ReducedKalman
from mbde_core.estimators.kalman.transition import ExplicitTransition, heun_step, position_step
from mbde_core.estimators.options.common import KalmanOptions, input_field
from mbde_core.estimators.traits import KALMAN_TUNABLE, Traits


@dataclass(frozen=True)
class DEKFOptions(KalmanOptions):
    """The DEKF's options: the common ones and these."""

    transition: str = "heun"             # transition.py
    inputs: tuple | str = input_field()  # auto: the rule's (none without force limits; README)
    input_jump_nis: float = 16.0  # as the UKF's (jump_directions: a gyroscope sees the jump through the step)
    measurement_order: int = 2


class DEKF(JumpHypothesis, ExplicitTransition, InputStates, ReducedKalman):
    name = "dekf"
    traits = Traits(cost=1.5, color=(0.58, 0.40, 0.74, 1.0), slot=5, tunable=KALMAN_TUNABLE, input_states=True, known_inputs=True,
                    follower=True)
    Options = DEKFOptions

    def __init__(self, mech, sensors, options, rng=None):
        super().__init__(mech, sensors, options, rng)
        self._F_cache = {}
        self._init_inputs()

    HYPOTHESIS = ("x", "P", "q", "qd", "full")  # jump_hypothesis: the state of a hypothesis

    def reset(self, t, init) -> None:
        super().reset(t, init)
        self._reset_inputs()
        self._alt = None
        self._span = 0.0

    def _F(self, dt):
        """(F, Sigma^P) for the step dt."""
        if self.k:
            return self._F_inputs(dt)
        mode = self.options.transition_jacobian
        if mode == "simple" and dt in self._F_cache:
            return self._F_cache[dt]
        g = self.g
        A = self.model.transition_jacobian(self.t, self.x, self.q, mode)
        out = (np.eye(2 * g) + dt * A, self.plant_noise(dt))
        if mode == "simple":
            self._F_cache[dt] = out
        return out

    def _F_inputs(self, dt):
        """(F, Sigma^P) of [z, zd, u] (module doc; B at the current state)."""
        g, g2 = self.g, 2 * self.g
        mode = self.options.transition_jacobian
        A = self.model.transition_jacobian(self.t, self.x[:g2], self.q, mode, extra_Q=self.extra_forces())
        F = np.eye(g2 + self.k)
        F[:g2, :g2] += dt * A
        B = self.input_gain(self._full().R)
        if self.options.transition != "euler":
            F[:g, g2:] = (0.5 * dt * dt) * B
        F[g:g2, g2:] = dt * B
        return F, self.augmented_noise(dt)

    def _zdd(self, st):
        """zdd of a FullState with the inputs' B u (the state's own zdd without inputs)."""
        if not self.k:
            return st.zdd
        return st.zdd + self.input_gain(st.R) @ self.u

    def predict(self, dt: float) -> None:
        self._span += dt  # s since the last update (the input jumps' directions)
        self._predict_both(self._predict_one, dt)

    def _predict_one(self, dt: float) -> None:
        g, g2 = self.g, 2 * self.g
        st = self._full()
        F, Qd = self._F(dt)
        zdd = self._zdd(st)
        x = np.concatenate([position_step(self.options.transition, self.x[:g], self.x[g:g2], zdd, dt), self.x[g:g2] + dt * zdd])
        if self.options.transition == "heun":  # second stage at the predicted state
            st1, ok = self.model.solve_full(self.t + dt, x[:g], x[g:], self.q + dt * self.qd + (0.5 * dt * dt) * st.rd)
            if ok:
                x = heun_step(self.x[None, :g2], zdd[None], self._zdd(st1)[None], dt, g)[0]
        if self.k:
            x = np.concatenate([x, self.u])
        self.P = F @ self.P @ F.T + Qd
        if self.k:
            self.P = 0.5 * (self.P + self.P.T)
        self.advance_clock(dt)
        self._assemble_into(x, self.q + dt * self.qd + (0.5 * dt * dt) * st.rd)

    def _innovation(self, measurements):
        """(names, dims, y, H, R, FullState) of the readings at the current state."""
        names = [m.sensor for m in measurements]
        dims = [self.sensors[n].dim for n in names]
        o = np.concatenate([np.asarray(m.value, float) for m in measurements]) if len(measurements) > 1 \
            else np.asarray(measurements[0].value, float)
        st = self._full()
        if self.k:
            pred, H = self._linearize_inputs(names, st)
        else:
            pred, H, _ = self.model.linearize(names, self.t, st)
        R = reading_noise(self.measurement_covariance(names), measurements, dims)
        pred, R = self.second_order(names, pred, R, H)
        return names, dims, self.model.residual(names, o, pred), H, R, st

    def _innovation_cov(self, measurements):
        """(y, S) of the readings at the current state (jump_hypothesis)."""
        _, _, y, H, R, _ = self._innovation(measurements)
        return y, H @ self.P @ H.T + R

    def update(self, measurements, gates=None):
        g = self.g
        self._decide(measurements)
        names, dims, y, H, R, st = self._innovation(measurements)
        before = None
        if self.k_unknown:  # a jump since the last update moved z and zd (jump_directions)
            ku = self.k_unknown
            G = jump_directions(len(self.x), g, 2 * g, self.input_gain(st.R)[:, :ku], self._span)
            P = input_jump(self.P, y, H, R, slice(2 * g, 2 * g + ku), self._u_sigma0[:ku] ** 2,
                           self.options.input_jump_nis, G)
            if P is not self.P:
                self.input_jumps += 1
                before = self._state_tuple()
            self.P = P
        self._span = 0.0
        dx, self.P, res = ekf_update(self.x, self.P, names, dims, y, H, R, gates)
        if res.accepted and self.k:  # the inputs within their limits (input_states.project_inputs)
            dx = project_inputs(dx, self.P, np.arange(2 * g, 2 * g + self.k), self.u, self._u_limit)
        if res.accepted:
            self._assemble_into(self.x + dx, self.q + st.R @ dx[:g])
            if before is not None:
                self._keep_alternative(before)
        return res

    def estimate(self):
        return self.input_snapshot(super().estimate())

