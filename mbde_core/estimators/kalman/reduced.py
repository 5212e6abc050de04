"""The multibody model seen by independent-coordinate observers: x = [z, zd] (paper 003 sec. 3.1).

Maps the filter state to the full motion and back: q(z) by the position problem (started
from the previous q: keeps the branch), qd = R zd, qdd = R zdd + R'zd with zdd = f(z, zd, t)
(R-matrix dynamics, eq. 3); the readings' predictions and noise. Its linearisation -- the
measurement Jacobian H = dh/dx by the chain rule and the transition Jacobian -- is
:class:`~mbde_core.estimators.kalman.linearization.Linearization`, the base of
:class:`ReducedModel`.

Speed (single states, the observers' hot path). :meth:`ReducedModel.solve_full` solves
the position problem and then evaluates, in one generated kernel call at the new
configuration, qd = R zd, zdd, qdd, R and R'zd (:mod:`mbde_core.engine.fastpath`); the
result, a :class:`FullState`, carries the kernels' context (sines, Phi_q and its block
determinants), so the measurement Jacobian at that state
(:meth:`~mbde_core.estimators.kalman.linearization.Linearization.linearize`) needs no
further Phi_q, R or LAPACK call. Observers start position problems from first- or
second-order predictors (q + R dz, or q + dt qd + dt^2/2 R'zd after an Euler step), so one
Newton iteration usually reaches the engine's tolerance. Without generated kernels (or when
a kernel meets an arithmetic exception) the generic engine functions run; both agree to
rounding.
"""
from __future__ import annotations

import numpy as np
import scipy.linalg

from mbde_core.engine import dynamics, fastpath, kinematics
from mbde_core.estimators.kalman.linearization import Linearization, _all_finite, _floats


class FullState:
    """A consistent single state and what the model evaluated there.

    q, qd, qdd (n,), zdd (g,), R (n, g), rd = R'zd (n,): arrays (qdd, zdd without any
    extra force). ``ctx``: (q as a list, sines/cosines, Phi_q entries) of the generated
    kernels at q, or None when the generic code ran.
    """

    __slots__ = ("q", "qd", "qdd", "zdd", "R", "rd", "ctx", "C")

    def __init__(self, q, qd, qdd, zdd, R, rd, ctx=None):
        self.q, self.qd, self.qdd, self.zdd, self.R, self.rd, self.ctx = q, qd, qdd, zdd, R, rd, ctx
        self.C = None  # d^2 q / dz dz (g, g, n), see ReducedModel.curvature


class ReducedModel(Linearization):
    """x = [z, zd] <-> (q, qd, qdd) for one mechanism and its sensors."""

    def __init__(self, mech, sensors):
        self.mech = mech
        self.sensors = sensors
        self.g = mech.dof
        self.iz = mech.independent
        self.dep = mech.dependent
        self._cov_cache = {}

    # -- assembly ------------------------------------------------------------------------------
    def assemble(self, x: np.ndarray, q_guess: np.ndarray):
        """(q, qd, ok) for x (2g,) or (N, 2g) with guesses q_guess (n,) or (N, n)."""
        g = self.g
        q, ok = kinematics.solve_position(self.mech, x[..., :g], q_guess)
        qd = kinematics.velocity(self.mech, q, x[..., g:])
        return q, qd, ok

    def accelerations(self, t, q, qd, extra_Q=None):
        """(zdd, qdd) from the dynamics, single or batched."""
        return dynamics.forward(self.mech, t, q, qd, extra_Q=extra_Q)

    def solve_full(self, t, z, zd, guess) -> tuple[FullState, bool]:
        """(FullState, ok) at z, zd (g,) from the position guess (n,) (single state).

        The position problem as :func:`kinematics.solve_position` (same tolerance and
        step limit), then qd = R zd and the dynamics at time t. ok False: the position
        problem failed or z, zd or the guess is not finite (the returned state is then not
        meaningful).
        """
        mech = self.mech
        zl, zdl, gl = _floats(z), _floats(zd), _floats(guess)
        if not (_all_finite(zl) and _all_finite(zdl) and _all_finite(gl)):
            # a diverged caller (non-finite state or guess): no position problem to solve,
            # and the kernels' math.sin would raise on an infinite angle
            q = np.asarray(guess, dtype=float)
            return FullState(q, np.full_like(q, np.nan), None, None, None, None), False
        K = fastpath.kernels(mech)
        if K is not None:
            try:
                xs, ok, tr, J = fastpath.s_position(mech, K, zl, gl, 30)
                qd, zdd, qdd, R, rd = K.scalar.post(J, tr, xs, zdl, K.time_values(t), None, True)
                return FullState(np.array(xs), np.array(qd), np.array(qdd), np.array(zdd), np.array(R), np.array(rd),
                                 (xs, tr, J)), ok
            except fastpath.SCALAR_ERRORS:
                pass  # singular or non-finite: the generic code decides
        q, ok = kinematics.solve_position(mech, np.asarray(z, dtype=float), np.asarray(guess, dtype=float))
        if not np.all(np.isfinite(q)):  # the position problem diverged
            return FullState(q, np.full_like(q, np.nan), None, None, None, None), False
        J = mech.phi_q(q)
        qd = kinematics.velocity(mech, q, np.asarray(zd, dtype=float), phi_q=J)
        if not ok:
            return FullState(q, qd, None, None, None, None), False
        ev = dynamics.evaluate(mech, t, q[None], qd[None])
        return FullState(q, qd, ev.qdd[0], ev.zdd[0], ev.R[0], ev.rdzd[0]), True

    def full_state_at(self, t, q, qd, with_dynamics: bool = True) -> FullState:
        """FullState at a consistent (q, qd) (no position problem); without ``with_dynamics``
        only R and the kernel context (qdd, zdd, rd None)."""
        mech = self.mech
        q, qd = np.asarray(q, dtype=float), np.asarray(qd, dtype=float)
        K = fastpath.kernels(mech)
        if K is not None:
            try:
                S, xs, tr = self._scalar_at(K, q)
                J = S.jac(xs, tr)
                if not with_dynamics:
                    return FullState(q, qd, None, None, np.array(S.rmatrix(J, tr)), None, (xs, tr, J))
                zdd, qdd, R, rd = S.dynamics_t(J, tr, xs, qd.tolist(), K.time_values(t), None)
                return FullState(q, qd, np.array(qdd), np.array(zdd), np.array(R), np.array(rd), (xs, tr, J))
            except fastpath.SCALAR_ERRORS:
                pass
        if not with_dynamics:
            return FullState(q, qd, None, None, kinematics.r_matrix(mech, q), None)
        ev = dynamics.evaluate(mech, t, q[None], qd[None])
        return FullState(q, qd, ev.qdd[0], ev.zdd[0], ev.R[0], ev.rdzd[0])

    def guess(self, st: FullState, dz, second_order: bool = False) -> np.ndarray:
        """Position guess for z + dz from a FullState: q + R dz (+ 1/2 d^2q/dz^2 [dz, dz],
        the curvature of the path z + s dz, s in [0, 1], if ``second_order``)."""
        out = st.q + st.R @ dz
        if second_order:
            C = self.curvature(st)
            out += 0.5 * np.einsum("k,l,kln->n", dz, dz, C) if self.g > 1 else (0.5 * dz[0] * dz[0]) * C[0, 0]
        return out

    def curvature(self, st: FullState) -> np.ndarray:
        """C = d^2 q / dz_k dz_l (g, g, n) at the FullState (cached in it).

        C[v, v] = sum_kl v_k v_l C_kl is the acceleration problem's R'zd with zd = v at
        q (Phi_q qdd = -(Phi_q)'(R v), qdd[z] = 0); the mixed terms by polarisation.
        """
        if st.C is not None:
            return st.C
        mech, g = self.mech, self.g
        R = st.R
        K = fastpath.kernels(mech) if st.ctx is not None else None

        def acc(v):  # R'zd at q for qd = v
            if K is not None:
                try:
                    xs, tr, J = st.ctx
                    return np.array(K.scalar.acceleration(J, tr, xs, v.tolist(), [0.0] * g))
                except fastpath.SCALAR_ERRORS:
                    pass
            return kinematics.rdot_zd(mech, st.q, v)

        C = np.empty((g, g, mech.n))
        for k in range(g):
            C[k, k] = acc(R[:, k])
        for k in range(g):
            for m in range(k + 1, g):
                C[k, m] = C[m, k] = 0.5 * (acc(R[:, k] + R[:, m]) - C[k, k] - C[m, m])
        st.C = C
        return C

    def assemble_near(self, t, X, st: FullState, accelerations: bool = False, center: int | None = None, r_out=None):
        """Full states of N filter states X (N, 2g) near the FullState ``st`` (sigma points).

        Position problems start from the second-order predictors (:meth:`guess`) of
        z_i - z_st from st; then qd = R zd and, with
        ``accelerations``, the dynamics at time t. Row ``center`` (if given) is st's own x
        and takes st's values. A state whose position problem fails takes st's q, qd (and
        accelerations). Returns (q (N, n), qd (N, n), zdd (N, g), qdd (N, n), ok (N,)),
        zdd and qdd None without ``accelerations``. r_out: a list that receives the N rows'
        R (n, g) where the generated kernels gave them with the accelerations (left empty
        otherwise: the caller evaluates R).
        """
        mech, g = self.mech, self.g
        N = X.shape[0]
        dZ = X[:, :g] - st.q[self.iz]
        G = st.q + dZ @ st.R.T
        C = self.curvature(st)
        G += 0.5 * (np.einsum("ik,il,kln->in", dZ, dZ, C) if g > 1 else (dZ * dZ) * C[0, 0])
        K = fastpath.kernels(mech) if st.ctx is not None else None
        if K is not None:
            try:
                S = K.scalar
                tv = K.time_values(t)
                qs, qds, zdds, qdds, oks, rs = [], [], [], [], [], []
                sq, sqd = st.q.tolist(), st.qd.tolist()
                sR = None if st.R is None else st.R.tolist()
                szdd = None if st.zdd is None else st.zdd.tolist()
                sqdd = None if st.qdd is None else st.qdd.tolist()
                for i, (xi, gi) in enumerate(zip(X.tolist(), G.tolist())):
                    if i == center:
                        qs.append(sq), qds.append(sqd), zdds.append(szdd), qdds.append(sqdd), oks.append(True)
                        rs.append(sR)
                        continue
                    xs, ok, tr, J = fastpath.s_position(mech, K, xi[:g], gi, 30)
                    if not ok:
                        qs.append(sq), qds.append(sqd), zdds.append(szdd), qdds.append(sqdd), oks.append(False)
                        rs.append(sR)
                        continue
                    if accelerations:
                        qd, zdd, qdd, Ri, _ = S.post(J, tr, xs, xi[g:], tv, None, True)
                        zdds.append(zdd), qdds.append(qdd), rs.append(Ri)
                    else:
                        qd = S.velocity(J, tr, xi[g:])
                    qs.append(xs), qds.append(qd), oks.append(True)
                ok = np.array(oks)
                if accelerations:
                    if r_out is not None and sR is not None:
                        r_out.extend(rs)
                    return np.array(qs), np.array(qds), np.array(zdds).reshape(N, g), np.array(qdds), ok
                return np.array(qs), np.array(qds), None, None, ok
            except fastpath.SCALAR_ERRORS:
                pass  # singular or non-finite: the generic code decides
        q, ok = kinematics.solve_position(mech, X[:, :g], G)
        qd = kinematics.velocity(mech, q, X[:, g:])
        if center is not None:
            q[center], qd[center], ok[center] = st.q, st.qd, True
        q[~ok], qd[~ok] = st.q, st.qd  # fall back to the reference configuration
        if not accelerations:
            return q, qd, None, None, ok
        ev = dynamics.evaluate(mech, t, q, qd)
        return q, qd, ev.zdd, ev.qdd, ok

    # -- measurement model ---------------------------------------------------------------------
    def predict_measurements(self, names, q, qd, qdd):
        """Stacked h of the named sensors (single state)."""
        return np.concatenate([self.sensors[n].h(q, qd, qdd) for n in names])

    def residual(self, names, measured: np.ndarray, predicted: np.ndarray) -> np.ndarray:
        if len(names) == 1:
            return self.sensors[names[0]].residual(measured, predicted)
        out, k = [], 0
        for n in names:
            s = self.sensors[n]
            out.append(s.residual(measured[k : k + s.dim], predicted[k : k + s.dim]))
            k += s.dim
        return np.concatenate(out)

    def covariance(self, names, overrides: dict | None = None) -> np.ndarray:
        """Block-diagonal measurement covariance; overrides: name -> (d, d) or variance."""
        blocks = []
        for n in names:
            if overrides and n in overrides:
                c = np.atleast_1d(np.asarray(overrides[n], dtype=float))
                blocks.append(np.diag(c) if c.ndim == 1 else c)
            else:
                blocks.append(self.sensors[n].covariance())
        return scipy.linalg.block_diag(*blocks) if len(blocks) > 1 else np.array(blocks[0], dtype=float)

    def angular_x(self, k: int = 0) -> np.ndarray:
        """(2g + k,) bool: the angle entries of x = [z, zd, u] (u: k inputs); read-only, cached."""
        out = self._cov_cache.get(("angular", k))
        if out is None:
            g = len(self.mech.independent)
            out = np.concatenate([np.isin(self.mech.independent, self.mech.rel_columns), np.zeros(g + k, bool)])
            out.setflags(write=False)
            self._cov_cache[("angular", k)] = out
        return out

    def noise_covariance(self, names, variances: dict) -> np.ndarray:
        """covariance(names) with the per-sensor variances ``variances`` (name -> float)
        for every channel of the named sensors that have one; cached per list of names
        (a read-only array: the observers' configuration does not change)."""
        key = tuple(names)
        out = self._cov_cache.get(key)
        if out is None:
            out = self.covariance(names, {n: np.full(self.sensors[n].dim, variances[n]) for n in names if n in variances})
            out.setflags(write=False)
            self._cov_cache[key] = out
        return out
