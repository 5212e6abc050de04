"""The linearisation of the independent-coordinate model x = [z, zd] (paper 003 sec. 3.1.2).

The base of :class:`~mbde_core.estimators.kalman.reduced.ReducedModel` (its ``mech``,
``sensors``, ``g``, ``iz``, ``dep`` and assembly methods):

- the measurement Jacobian H = dh/dx by the chain rule: dq/dz = R, dqd/dzd = R, and
  dqd/dz_k = d(R zd)/dz_k whose dependent part solves Phi_q,d (dqd/dz_k)_d = -D(R_k, qd),
  where D(u, v) = u^T (d^2 Phi / dq^2) v is the symmetric bilinear form with
  D(qd, qd) = (Phi_q)' qd (obtained by polarisation: D(u, v) = [D(u+v, u+v) - D(u-v, u-v)] / 4);
- sensors that read accelerations (accelerometers) also depend on x through
  qdd(x) = R f(x) + R'zd; that part, dqdd/dx, is taken by central differences of the
  dynamics (documented numerical scheme; the other terms are analytic);
- the continuous transition Jacobian A = d[zd, zdd]/d[z, zd] either simplified to
  [[0, I], [0, 0]] (paper 003 eq. 13: the observers' default) or complete, with
  df/dx by central differences of the dynamics (``full``).

At a :class:`~mbde_core.estimators.kalman.reduced.FullState` with a kernel context the
polarisation terms are 2g evaluations of the generated (Phi_q)' qd and the dependent
solves use the generated block-triangular solve (:meth:`Linearization.linearize`, the
observers' path); :meth:`Linearization.measurement_jacobian` is the generic reference it
is tested against.
"""
from __future__ import annotations

import math

import numpy as np

from mbde_core.engine import fastpath, kinematics
from mbde_core.sensors.base import linearize_one


class Linearization:
    """Jacobians of the readings and of the transition (see the module docstring)."""

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

    def _dqdd_dx(self, t, q, qd, extra_Q, eps, st=None):
        """dqdd/dx (n, 2g) by central differences of the dynamics (sensors reading qdd); st:
        the FullState of (q, qd), if any (its R and kernel context start the position problems)."""
        mech, g = self.mech, self.g
        x = np.concatenate([q[self.iz], qd[self.iz]])
        K = fastpath.kernels(mech) if extra_Q is None else None
        if K is not None:
            try:
                out = self._dqdd_dx_scalar(K, t, x.tolist(), q.tolist(), eps, st)
                if out is not None:
                    return out
            except fastpath.SCALAR_ERRORS:
                pass  # the generic loop below decides
        # the 4g states x +- step e_k assembled and evaluated as one batch
        steps = eps * np.maximum(1.0, np.abs(x))
        X = np.concatenate([x + np.diag(steps), x - np.diag(steps)])
        N = X.shape[0]
        qb, qdb, _ = self.assemble(X, np.broadcast_to(q, (N, mech.n)))
        eq = None if extra_Q is None else np.broadcast_to(np.asarray(extra_Q, dtype=float), qb.shape)
        qdd = self.accelerations(t, qb, qdb, eq)[1]
        return (qdd[: 2 * g] - qdd[2 * g:]).T / (2 * steps)

    def _dqdd_dx_scalar(self, K, t, x, q, eps, st=None):
        """:meth:`_dqdd_dx` on the scalar kernels (the same operations as its loop through
        :meth:`qdd_of_x` and :meth:`solve_full`, without their arrays): the position
        problem of a velocity perturbation is the unperturbed one (z unchanged, same
        guess), solved once for all of them -- not at all when ``st`` (the FullState at x,
        with a kernel context) gives it; with ``st`` the position problems of z +- step e_k
        start from q +- step R e_k (one Newton iteration fewer; the same solution to the
        engine's tolerance). None for a non-finite x or q (the generic loop handles them)."""
        if not (_all_finite(x) and _all_finite(q)):
            return None
        mech, g, S = self.mech, self.g, K.scalar
        tv = K.time_values(t)
        z, zd = x[:g], x[g:]
        base = None
        Rk = None
        if st is not None and st.ctx is not None and st.R is not None:
            xs0, tr0, J0 = st.ctx
            base = (xs0, True, tr0, J0)
            Rk = st.R.T.tolist()  # columns of R
        cols = []
        for k in range(2 * g):
            step = eps * max(1.0, abs(x[k]))
            pair = []
            for sgn in (1.0, -1.0):
                xk = x[k] + step if sgn > 0 else x[k] - step
                if k < g:
                    zk = list(z)
                    zk[k] = xk
                    guess = q if Rk is None else [a + (sgn * step) * r for a, r in zip(q, Rk[k])]
                    xs, _, tr, J = fastpath.s_position(mech, K, zk, guess, 30)
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
            H = H + Hqdd @ self._dqdd_dx(t, st.q, st.qd, extra_Q, eps, st)
            return h, H, Hqdd
        return h, H, None

    # -- transition ------------------------------------------------------------------------------
    def transition_jacobian(self, t, x, q, mode: str = "simple", extra_Q=None, eps: float = 1e-6):
        """Continuous-time A = d[zd, f]/d[z, zd] (2g, 2g); ``full``: df/dx by central
        differences at the 4g states x +- step e_k, on the scalar kernels
        (:meth:`_dqdd_dx_scalar`, f = qdd[z]) or, without them or with extra forces, assembled
        and evaluated as one batch."""
        g = self.g
        A = np.zeros((2 * g, 2 * g))
        A[:g, g:] = np.eye(g)
        if mode == "simple":
            return A
        x = np.asarray(x, dtype=float)
        K = fastpath.kernels(self.mech) if extra_Q is None else None
        if K is not None:  # the same differences on the scalar kernels (zdd = qdd[z]): no batch set-up
            try:
                out = self._dqdd_dx_scalar(K, t, x.tolist(), np.asarray(q, dtype=float).tolist(), eps)
                if out is not None:
                    A[g:, :] = out[self.iz]
                    return A
            except fastpath.SCALAR_ERRORS:
                pass
        steps = eps * np.maximum(1.0, np.abs(x))
        X = np.concatenate([x + np.diag(steps), x - np.diag(steps)])  # rows x + step e_k, then x - step e_k
        N = X.shape[0]
        qb, qdb, _ = self.assemble(X, np.broadcast_to(np.asarray(q, dtype=float), (N, self.mech.n)))
        eq = None if extra_Q is None else np.broadcast_to(np.asarray(extra_Q, dtype=float), qb.shape)
        f = self.accelerations(t, qb, qdb, eq)[0]
        A[g:, :] = (f[: 2 * g] - f[2 * g:]).T / (2 * steps)
        return A

    def input_gain(self, q, columns, R=None) -> np.ndarray:
        """dzdd/du (g, k) for generalized forces u on coordinates ``columns``: Mbar^-1 R^T E
        (read-only; the last q's kept: an observer asks at one configuration several times
        per step). R: R(q) if the caller has it (a FullState at q), else it is evaluated."""
        key = (np.asarray(q, dtype=float).tobytes(), tuple(int(c) for c in columns), self.mech.M.tobytes())
        last = getattr(self, "_input_gain_last", None)
        if last is not None and last[0] == key:
            return last[1]
        out = self._input_gain(q, columns, R)
        out.setflags(write=False)
        self._input_gain_last = (key, out)
        return out

    def _input_gain(self, q, columns, R=None) -> np.ndarray:
        mech = self.mech
        if R is None:
            R = kinematics.r_matrix(mech, q)
        Mbar = R.T @ mech.M @ R
        E = np.zeros((mech.n, len(columns)))
        E[list(columns), np.arange(len(columns))] = 1.0
        return (R.T @ E) / Mbar if Mbar.shape == (1, 1) else np.linalg.solve(Mbar, R.T @ E)  # one DOF: a division


def _all_finite(values) -> bool:
    """Whether every float of a list is finite."""
    return all(map(math.isfinite, values))


def _floats(x) -> list:
    """A list of Python floats from a sequence or array."""
    return x.tolist() if isinstance(x, np.ndarray) else [float(v) for v in x]
