"""The multibody model seen by independent-coordinate observers: x = [z, zd] (paper 003 sec. 3.1).

Maps the filter state to the full motion and back, and linearises the sensors:

- q(z) by the position problem (started from the previous q: keeps the branch),
  qd = R zd, qdd = R zdd + R'zd with zdd = f(z, zd, t) (R-matrix dynamics, eq. 3);
- the measurement Jacobian H = dh/dx by the chain rule (paper 003 sec. 3.1.2):
  dq/dz = R, dqd/dzd = R, and dqd/dz_k = d(R zd)/dz_k whose dependent part solves
  Phi_q,d (dqd/dz_k)_d = -D(R_k, qd), where D(u, v) = u^T (d^2 Phi / dq^2) v is the
  symmetric bilinear form with D(qd, qd) = (Phi_q)' qd (obtained by polarisation:
  D(u, v) = [D(u+v, u+v) - D(u-v, u-v)] / 4);
- sensors that read accelerations (accelerometers) also depend on x through
  qdd(x) = R f(x) + R'zd; that part, dqdd/dx, is taken by central differences of the
  dynamics (documented numerical scheme; the other terms are analytic).
- the continuous transition Jacobian A = d[zd, zdd]/d[z, zd] either simplified to
  [[0, I], [0, 0]] (paper 003 eq. 13: the observers' default) or complete, with
  df/dx by central differences of the dynamics (``full``).

Speed (single states, the observers' hot path). :meth:`ReducedModel.solve_full` solves
the position problem and then evaluates, in one generated kernel call at the new
configuration, qd = R zd, zdd, qdd, R and R'zd (:mod:`mbde_core.engine.fastpath`); the
result, a :class:`FullState`, carries the kernels' context (sines, Phi_q and its block
determinants), so the measurement Jacobian at that state (:meth:`ReducedModel.linearize`)
needs no further Phi_q, R or LAPACK call: the polarisation terms are 2g evaluations of
the generated (Phi_q)' qd and the dependent solves use the generated block-triangular
solve. Observers start position problems from first- or second-order predictors
(q + R dz, or q + dt qd + dt^2/2 R'zd after an Euler step), so one Newton iteration
usually reaches the engine's tolerance. Without generated kernels (or when a kernel meets
an arithmetic exception) the generic engine functions run; both agree to rounding.
"""
from __future__ import annotations

import math

import numpy as np

from mbde_core.engine import dynamics, fastpath, kinematics
from mbde_core.engine.linalg import solve
from mbde_core.sensors.base import linearize_one


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


class ReducedModel:
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

    def assemble_near(self, t, X, st: FullState, accelerations: bool = False, center: int | None = None):
        """Full states of N filter states X (N, 2g) near the FullState ``st`` (sigma points).

        Position problems start from the second-order predictors (:meth:`guess`) of
        z_i - z_st from st; then qd = R zd and, with
        ``accelerations``, the dynamics at time t. Row ``center`` (if given) is st's own x
        and takes st's values. A state whose position problem fails takes st's q, qd (and
        accelerations). Returns (q (N, n), qd (N, n), zdd (N, g), qdd (N, n), ok (N,)),
        zdd and qdd None without ``accelerations``.
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
                qs, qds, zdds, qdds, oks = [], [], [], [], []
                sq, sqd = st.q.tolist(), st.qd.tolist()
                szdd = None if st.zdd is None else st.zdd.tolist()
                sqdd = None if st.qdd is None else st.qdd.tolist()
                for i, (xi, gi) in enumerate(zip(X.tolist(), G.tolist())):
                    if i == center:
                        qs.append(sq), qds.append(sqd), zdds.append(szdd), qdds.append(sqdd), oks.append(True)
                        continue
                    xs, ok, tr, J = fastpath.s_position(mech, K, xi[:g], gi, 30)
                    if not ok:
                        qs.append(sq), qds.append(sqd), zdds.append(szdd), qdds.append(sqdd), oks.append(False)
                        continue
                    if accelerations:
                        qd, zdd, qdd, _, _ = S.post(J, tr, xs, xi[g:], tv, None, True)
                        zdds.append(zdd), qdds.append(qdd)
                    else:
                        qd = S.velocity(J, tr, xi[g:])
                    qs.append(xs), qds.append(qd), oks.append(True)
                ok = np.array(oks)
                if accelerations:
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
        return _block_diag(blocks)

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

    def bilinear_many(self, q, pairs, ctx=None) -> np.ndarray:
        """D(u_k, v_k) = u_k^T (d^2 Phi/dq^2) v_k (k, m) for pairs [(u_k, v_k)] at one q (n,),
        by polarisation of (Phi_q)'qd: D(u, v) = ((Phi_q)'(u+v) (u+v) - (Phi_q)'(u-v) (u-v)) / 4,
        with the generated kernel on Python floats (ctx: a FullState's kernel context)."""
        mech = self.mech
        K = fastpath.kernels(mech)
        if K is not None:
            try:
                S = K.scalar
                xs, tr = (ctx[0], ctx[1]) if ctx is not None else (None, None)
                if xs is None:
                    xs = np.asarray(q, dtype=float).tolist()
                    tr = S.trig(xs)
                out = []
                for u, v in pairs:
                    u, v = _floats(u), _floats(v)
                    a = S.jdot(xs, [x + y for x, y in zip(u, v)], tr)
                    b = S.jdot(xs, [x - y for x, y in zip(u, v)], tr)
                    out.append([0.25 * (x - y) for x, y in zip(a, b)])
                return np.array(out).reshape(len(pairs), -1)
            except fastpath.SCALAR_ERRORS:
                pass
        q = np.asarray(q, dtype=float)
        U = np.array([np.asarray(u, dtype=float) for u, _ in pairs])
        V = np.array([np.asarray(v, dtype=float) for _, v in pairs])
        qb = np.broadcast_to(q, (2 * len(pairs), q.shape[0]))
        both = mech.phi_q_dot_qd(qb, np.concatenate([U + V, U - V]))
        return 0.25 * (both[: len(pairs)] - both[len(pairs) :])

    def dqd_dz(self, q, qd, R, phi_q):
        """d(R zd)/dz (n, g) at fixed zd (single state)."""
        n, g = self.mech.n, self.g
        out = np.zeros((n, g))
        Jd = phi_q[:, self.dep]
        rhs = -self.bilinear_many(q, [(R[:, k], qd) for k in range(g)]).T  # (m, g)
        out[self.dep, :] = np.linalg.solve(Jd, rhs)
        return out

    def dqd_dz_at(self, st: FullState) -> np.ndarray:
        """d(R zd)/dz (n, g) at a FullState (generated solves when it has a kernel context)."""
        mech = self.mech
        K = fastpath.kernels(mech) if st.ctx is not None else None
        if K is not None:
            try:
                S = K.scalar
                xs, tr, J = st.ctx
                g = self.g
                D = self.bilinear_many(st.q, [(st.R[:, k], st.qd) for k in range(g)], st.ctx)
                out = np.zeros((mech.n, g))
                for k in range(g):
                    out[self.dep, k] = S.dsolve(J, tr, (-D[k]).tolist())
                return out
            except fastpath.SCALAR_ERRORS:
                pass
        return self.dqd_dz(st.q, st.qd, st.R, mech.phi_q(st.q))

    @staticmethod
    def _scalar_at(K, q):
        """(float kernels, q as a list, their sines/cosines at q)."""
        xs = q.tolist()
        return K.scalar, xs, K.scalar.trig(xs)

    def constraint_values(self, q):
        """(Phi(q) (m,), Phi_q (m, n), kernel context) at any q (n,) (single state)."""
        mech = self.mech
        K = fastpath.kernels(mech)
        if K is not None:
            try:
                S, xs, tr = self._scalar_at(K, q)
                J = np.zeros(K.m * K.n)
                J[K.jac_flat] = S.jac_values(xs, tr)
                return np.array(S.phi(xs, tr)), J.reshape(K.m, K.n), (xs, tr, None)
            except fastpath.SCALAR_ERRORS:
                pass
        return mech.phi(q), mech.phi_q(q), None

    def constraint_hessian_qd(self, q, qd, ctx=None) -> np.ndarray:
        """d(Phi_q qd)/dq (m, n) at fixed qd: the columns D(e_j, qd) (polarisation)."""
        n = self.mech.n
        E = np.eye(n)
        return self.bilinear_many(q, [(E[j], qd) for j in range(n)], ctx).T

    def qdd_of_x(self, t, x, q_guess, extra_Q=None):
        if extra_Q is None and np.ndim(x) == 1:  # one state: the scalar kernels of solve_full
            st, ok = self.solve_full(t, x[: self.g], x[self.g :], q_guess)
            if st.qdd is not None:
                return st.qdd
        q, qd, ok = self.assemble(x, q_guess)
        return self.accelerations(t, q, qd, extra_Q)[1]

    def _dqdd_dx(self, t, q, qd, extra_Q, eps):
        """dqdd/dx (n, 2g) by central differences of the dynamics (sensors reading qdd)."""
        mech, g = self.mech, self.g
        x = np.concatenate([q[self.iz], qd[self.iz]])
        K = fastpath.kernels(mech) if extra_Q is None else None
        if K is not None:
            try:
                out = self._dqdd_dx_scalar(K, t, x.tolist(), q.tolist(), eps)
                if out is not None:
                    return out
            except fastpath.SCALAR_ERRORS:
                pass  # the generic loop below decides
        dqdd = np.zeros((mech.n, 2 * g))
        for k in range(2 * g):
            step = eps * max(1.0, abs(x[k]))
            xp, xm = x.copy(), x.copy()
            xp[k] += step
            xm[k] -= step
            dqdd[:, k] = (self.qdd_of_x(t, xp, q, extra_Q) - self.qdd_of_x(t, xm, q, extra_Q)) / (2 * step)
        return dqdd

    def _dqdd_dx_scalar(self, K, t, x, q, eps):
        """:meth:`_dqdd_dx` on the scalar kernels (the same operations as its loop through
        :meth:`qdd_of_x` and :meth:`solve_full`, without their arrays): the position
        problem of a velocity perturbation is the unperturbed one (z unchanged, same
        guess), solved once for all of them. None for a non-finite x or q (the generic
        loop handles them)."""
        if not (_all_finite(x) and _all_finite(q)):
            return None
        mech, g, S = self.mech, self.g, K.scalar
        tv = K.time_values(t)
        z, zd = x[:g], x[g:]
        base = None
        cols = []
        for k in range(2 * g):
            step = eps * max(1.0, abs(x[k]))
            pair = []
            for sgn in (1.0, -1.0):
                xk = x[k] + step if sgn > 0 else x[k] - step
                if k < g:
                    zk = list(z)
                    zk[k] = xk
                    xs, _, tr, J = fastpath.s_position(mech, K, zk, q, 30)
                    zdk = zd
                else:
                    if base is None:
                        base = fastpath.s_position(mech, K, z, q, 30)
                    xs, _, tr, J = base
                    zdk = list(zd)
                    zdk[k - g] = xk
                pair.append(S.post(J, tr, xs, zdk, tv, None, True)[2])
            h2 = 2 * step
            cols.append([(a - b) / h2 for a, b in zip(pair[0], pair[1])])
        return np.array(cols).T.copy()

    def sensor_terms(self, names, q, qd, qdd):
        """(h (d,), dh/dq, dh/dqd, dh/dqdd (d, n)) of the stacked named sensors (single state).

        A sensor with a fused single-state ``linearize(q, qd, qdd)`` gives all four at
        once; otherwise its ``h`` and ``jacobians``.
        """
        parts = [linearize_one(self.sensors[n], q, qd, qdd) for n in names]
        if len(parts) == 1:
            return parts[0]
        return tuple(np.concatenate([p[i] for p in parts], axis=0) for i in range(4))

    def measurement_jacobian(self, names, t, q, qd, qdd, extra_Q=None, eps: float = 1e-6):
        """H = dh/dx (d, 2g) of the stacked named sensors at a consistent state (single).

        The generic reference (engine Phi_q and R, the sensors' batched Jacobians, no
        generated kernels) against which :meth:`linearize`, the observers' path, is tested.
        """
        mech = self.mech
        J = mech.phi_q(q)
        R = kinematics.r_matrix(mech, q, phi_q=J)
        dqd_dz = self.dqd_dz(q, qd, R, J)
        uses_qdd = any(self.sensors[n].uses_qdd for n in names)
        dqdd = self._dqdd_dx(t, q, qd, extra_Q, eps) if uses_qdd else None
        rows = []
        for n in names:
            s = self.sensors[n]
            Hq, Hqd, Hqdd = s.jacobians(q, qd, qdd)
            Hz = Hq @ R + Hqd @ dqd_dz
            Hzd = Hqd @ R
            H = np.concatenate([Hz, Hzd], axis=1)
            if s.uses_qdd:
                H = H + Hqdd @ dqdd
            rows.append(H)
        return np.concatenate(rows, axis=0)

    def linearize(self, names, t, st: FullState, qdd=None, extra_Q=None, eps: float = 1e-6):
        """(h (d,), H (d, 2g), Hqdd (d, n) or None) of the stacked named sensors at a FullState.

        h and H are those of :meth:`predict_measurements` and :meth:`measurement_jacobian`
        (equal to rounding), with R and the kernel context of the state. qdd: the
        accelerations the sensors see (default: the state's own, st.qdd); used only if a
        sensor reads accelerations. Hqdd: dh/dqdd, returned for such sensors.
        """
        uses_qdd = self.sensors.uses_qdd(names)
        if uses_qdd and qdd is None:
            qdd = st.qdd
        h, Hq, Hqd, Hqdd = self.sensor_terms(names, st.q, st.qd, qdd if uses_qdd else None)
        R = st.R
        Hzd = Hqd @ R
        H = np.concatenate([Hq @ R + Hqd @ self.dqd_dz_at(st), Hzd], axis=1)
        if uses_qdd:
            H = H + Hqdd @ self._dqdd_dx(t, st.q, st.qd, extra_Q, eps)
            return h, H, Hqdd
        return h, H, None

    # -- transition ------------------------------------------------------------------------------
    def transition_jacobian(self, t, x, q, mode: str = "simple", extra_Q=None, eps: float = 1e-6):
        """Continuous-time A = d[zd, f]/d[z, zd] (2g, 2g)."""
        g = self.g
        A = np.zeros((2 * g, 2 * g))
        A[:g, g:] = np.eye(g)
        if mode == "simple":
            return A
        for k in range(2 * g):
            step = eps * max(1.0, abs(x[k]))
            xp, xm = x.copy(), x.copy()
            xp[k] += step
            xm[k] -= step
            qp, qdp, _ = self.assemble(xp, q)
            qm, qdm, _ = self.assemble(xm, q)
            fp = self.accelerations(t, qp, qdp, extra_Q)[0]
            fm = self.accelerations(t, qm, qdm, extra_Q)[0]
            A[g:, k] = (fp - fm) / (2 * step)
        return A

    def input_gain(self, q, columns) -> np.ndarray:
        """dzdd/du (g, k) for generalized forces u on coordinates ``columns``: Mbar^-1 R^T E."""
        mech = self.mech
        R = kinematics.r_matrix(mech, q)
        Mbar = R.T @ mech.M @ R
        E = np.zeros((mech.n, len(columns)))
        E[list(columns), np.arange(len(columns))] = 1.0
        return np.linalg.solve(Mbar, R.T @ E)


def _all_finite(values) -> bool:
    """Whether every float of a list is finite."""
    return all(map(math.isfinite, values))


def _floats(x) -> list:
    """A list of Python floats from a sequence or array."""
    return x.tolist() if isinstance(x, np.ndarray) else [float(v) for v in x]


def _block_diag(blocks):
    if len(blocks) == 1:
        return np.array(blocks[0], dtype=float)
    size = sum(b.shape[0] for b in blocks)
    out = np.zeros((size, size))
    k = 0
    for b in blocks:
        d = b.shape[0]
        out[k : k + d, k : k + d] = b
        k += d
    return out


def joseph_update(P, K, H, R):
    """Joseph-form covariance update (I - K H) P (I - K H)^T + K R K^T (stays symmetric PSD)."""
    I_KH = np.eye(P.shape[0]) - K @ H
    P = I_KH @ P @ I_KH.T + K @ R @ K.T
    return 0.5 * (P + P.T)


def kalman_gain(P, H, S):
    """K = P H^T S^-1 via a solve (S symmetric positive definite)."""
    return solve(S, H @ P).T if S.shape[0] > 0 else np.zeros((P.shape[0], 0))
