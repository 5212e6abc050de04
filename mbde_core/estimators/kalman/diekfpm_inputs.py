"""Unknown generalized-force inputs of the DIEKFpm (:mod:`diekfpm`): the random-walk input
states of :mod:`input_states` (paper 004 eqs. 30-33) on the dependent-coordinate filter.

The inputs u (k) follow the dependent state X = [q, qd]: the estimate is [X, u] (2n + k)
and the tangent covariance Pz is that of [z, zd, u] (2g + k). With E (n, k) the unit
columns of the inputs' coordinates::

    qdd = the R-matrix dynamics with the generalized forces E u,
    u' = w_u,    E[w_u w_u^T] = diag(psd) delta(t),

so the prediction's accelerations (both Heun stages) include the inputs, the transition
of [z, zd, u] gains dz+/du = dt^2/2 B (0 for ``transition: euler``), dzd+/du = dt B,
B = (R^T M R)^-1 R^T E (as the DEKF), the plant noise diag(psd) dt for u, and the
iterated update works on [X, u] with T_a = blockdiag(T, I_k) (the constraints do not
involve u; the readings see it through qdd: dh/du by the same central differences as
dh/dX). ``limit`` bounds the inputs after each update (:func:`input_states.project_inputs`);
``input_jump_nis`` raises their variances before an update whose reading asks for a jump
(:func:`input_states.jump_variance`, on the first pass's innovation), and the next
reading decides between that jump and an outlier (:mod:`jump_hypothesis`, as the DEKF
and errorEKF: without it ``mbde bench faults`` on adekf_slider_crank lost the crank at
the outliers, 164x the clean RMSE). ``absorb_inputs`` (off by default): with
``transition_jacobian: full`` the rows df/dx of A lose their part in the unknown inputs'
directions (:func:`input_states.unabsorbed`, as the UKF's sigma points): adekf_slider_crank
(1 kHz, 3 s, the trust bench's runs 0-2) NEES/dim 3.3 -> 1.8-1.9, coverage 50 -> 91 %, but over 5 s
(test_diekfpm_inputs' run through the 40 -> 50 rad/s step at 3.33 s) the crank is lost
(RMSE 1.5 rad, 0.03 without): not the default until that is understood.
"""
from __future__ import annotations

import numpy as np

from mbde_core.engine import kinematics
from mbde_core.estimators.kalman.input_states import (init_input_attributes, input_forces, input_names, jump_variance,
                                                     for_both, jump_directions, known_input_state,
                                                     absorbing, project_inputs, unabsorbed, validate_inputs)
from mbde_core.estimators.kalman.jump_hypothesis import JumpHypothesis


class DependentInputs(JumpHypothesis):
    """Mixin of :class:`~mbde_core.estimators.kalman.diekfpm.DIEKFpm` (module doc): call
    :meth:`_init_inputs` in ``__init__``; the filter keeps ``self.u`` beside ``self.X``."""

    @classmethod
    def validate_config(cls, cfg: dict, file: str, path: str) -> None:
        """The ``inputs`` and ``input_jump_nis`` options (:func:`validate_inputs`)."""
        validate_inputs(cfg, file, path)
        super().validate_config(cfg, file, path)

    def _init_inputs(self) -> None:
        init_input_attributes(self)
        self.u = self._u_initial.copy()

    def _reset_inputs(self, Pz: np.ndarray) -> np.ndarray:
        """u = the configured initial values; Pz of [z, zd] widened by diag(sigma0^2)."""
        self.u = self._u_initial.copy()
        self._span = 0.0  # s since the last update (the input jumps' directions)
        return self._augment(Pz, np.diag(self._u_sigma0**2))

    def _augment(self, M: np.ndarray, Mu: np.ndarray) -> np.ndarray:
        """blockdiag(M, Mu) (M itself without inputs)."""
        if not self.k:
            return M
        a, b = M.shape
        out = np.zeros((a + Mu.shape[0], b + Mu.shape[1]))
        out[:a, :b] = M
        out[a:, b:] = Mu
        return out

    def _forces(self, u=None):
        """The inputs' generalized forces E u (n,) (None without inputs)."""
        if not self.k:
            return None
        return input_forces(self.mech.n, self.input_cols, self.u if u is None else u)

    def _input_transition(self, Fz: np.ndarray, q: np.ndarray, dt: float) -> np.ndarray:
        """Fz (2g, 2g) of [z, zd] extended to [z, zd, u] (module doc)."""
        if not self.k:
            return Fz
        g = self.mech.dof
        F = self._augment(Fz, np.eye(self.k))
        B = self.model.input_gain(q, self.input_cols)
        if self.options.transition != "euler":
            F[:g, 2 * g:] = (0.5 * dt * dt) * B
        F[g:2 * g, 2 * g:] = dt * B
        return F

    def _absorbed_jacobian(self, A: np.ndarray, q: np.ndarray) -> np.ndarray:
        """A (2g, 2g) with df/dx's part in the unknown inputs' directions dropped
        (:func:`input_states.unabsorbed`; ``absorb_inputs``, off by default): the unknown
        inputs take the known forces' state dependence, as in the UKF's sigma points."""
        cols = absorbing(self) if self.options.absorb_inputs else []
        g = self.mech.dof
        if not cols:
            return A
        R = kinematics.r_matrix(self.mech, q)
        Mbar = R.T @ self.mech.M @ R
        A = A.copy()
        A[g:] = unabsorbed(A[g:].T, self.model.input_gain(q, [self.input_cols[j] for j in cols]), Mbar).T
        return A

    def _input_noise(self, Qz: np.ndarray, dt: float) -> np.ndarray:
        return self._augment(Qz, np.diag(self._u_psd * dt))

    def _input_jump(self, y, S, H) -> bool:
        """Whether the reading (innovation y, its covariance S, Jacobian H over [X, u]) asks
        for a jump of the inputs (:func:`input_states.jump_variance`, ``input_jump_nis``);
        if so Pz's input variances are raised to it."""
        jn, ku, g = float(self.options.input_jump_nis), self.k_unknown, self.mech.dof
        if not jn or not ku:
            return False
        idx = np.arange(2 * g, 2 * g + ku)
        B = self.model.input_gain(self.X[: self.n], self.input_cols[:ku])
        # over [z, zd, u]: a jump since the last update, for readings that do not see the inputs
        # directly (a gyroscope); an accelerometer's own input columns decide (with the step's
        # directions the DIEKFpm lost paper 004's slider-crank, test_diekfpm_inputs)
        span = 0.0 if np.any(H[:, H.shape[1] - self.k:][:, :ku]) else self._span
        G = jump_directions(2 * g + self.k, g, 2 * g, B, span)
        Pa = self.Pz[idx, idx]
        V = jump_variance(Pa, y, S, H @ self._Ta(self._prior_T(self.X)) @ G, self._u_sigma0[:ku] ** 2, jn)
        if V is None:
            return False
        self.Pz = self.Pz + (G * (V - Pa)) @ G.T
        self.input_jumps += 1
        return True

    def _innovation_cov(self, measurements):
        """(y, S) of the readings at the current state, [X, u] (jump_hypothesis)."""
        names, o, Rs = self._readings(measurements)
        P = self._prior_P()
        Xa = np.concatenate([self.X, self.u]) if self.k else self.X
        h, H = self._augmented(names, Xa)
        return self.model.residual(names, o, h), H @ P @ H.T + Rs

    def _bound_inputs(self, Xa: np.ndarray, P: np.ndarray) -> np.ndarray:
        """[X, u] with u within its limits (projected along P, input_states.project_inputs)."""
        if not self.k or not np.isfinite(self._u_limit).any():
            return Xa
        m = Xa.shape[0] - self.k
        idx = np.arange(m, m + self.k)
        dx = project_inputs(np.zeros_like(Xa), P, idx, Xa[idx], self._u_limit)
        return Xa + dx

    def set_known_inputs(self, values, variances) -> None:
        """The held known inputs and their variances for the next step (Pz's rows and
        columns, :func:`~mbde_core.estimators.kalman.input_states.known_input_state`)."""
        if self.k_known:
            first = 2 * self.mech.dof + self.k_unknown

            def held():
                self.u, self.Pz = known_input_state(self.u, self.Pz, first, values, variances)
            for_both(self, held)

    def input_snapshot(self, snap):
        """The snapshot with the estimated inputs (names, values, covariance)."""
        if self.k:
            g2 = 2 * self.mech.dof
            snap.input_names = input_names(self)
            snap.inputs = self.u.copy()
            snap.input_cov = self.Pz[g2:, g2:].copy()
        return snap
