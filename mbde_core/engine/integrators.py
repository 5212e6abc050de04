"""One-step integrators of the multibody equations, all with the same interface.

``integrator.step(mech, t, state, h, extra_zdd=None) -> MBState`` advances a single
state (arrays (n,)) or a batch (arrays (N, n)) from t to t + h. ``extra_zdd`` (g,) or
(N, g) is an acceleration added to the independent accelerations during the step (the
acceleration noise v of paper 000 eq. 11); the variational integrators apply it as the
generalized force M R v, which changes zdd by exactly v.

Independent-coordinate (R-matrix) integrators, state x = [z, zd], zdd = f(z, zd, t)
(paper 003 eqs. 3-4):

- ``euler``:  z1 = z0 + h zd0,  zd1 = zd0 + h f(x0)  (paper 003 eq. 12);
- ``rk4``:    classical 4th-order Runge-Kutta (paper 000 sec. 4.3);
- ``trapezoidal``: x1 = x0 + h/2 (F(x0) + F(x1)), implicit, Newton on zd1.

After the step q is recovered by the position problem started from q0 + h qd0, which
keeps every particle on its own assembly branch.

Variational integrators in natural coordinates with holonomic constraints (paper 002
sec. 2; constrained discrete Euler-Lagrange equations in position-momentum form, with
the RATTLE velocity projection), solved by Newton on the independent coordinates
(:mod:`mbde_core.engine.variational`, which states the equations):

- ``midpoint`` (2nd order), from L_d = h L((q0+q1)/2, (q1-q0)/h) (paper 002 eq. 6);
- ``symplectic_euler`` (1st order), from L_d = h [1/2 v^T M v - V(q1)] (paper 002 eq. 5).

Both also take the additive noise of the stochastic schemes (``step_noisy``).

``ali3p`` (:mod:`mbde_core.engine.ali3p`) is the drift-free index-3 augmented
Lagrangian formulation with the trapezoidal rule, also exposed here.

Speed: ``euler`` and ``rk4`` run on the mechanism's generated kernels when it has them
(:mod:`mbde_core.engine.fastpath`): one state as Python floats, a batch as batch-last
arrays; the dynamics evaluation after each position problem reuses its Jacobian. The
algorithm text below (``_euler``, ``_rk4``) is shared by both layouts and by the
generic fallback, so all three do the same operations in the same order. Batched
results are Fortran-ordered (N, n) views (no copy when steps are chained).
"""
from __future__ import annotations

import numpy as np

from mbde_core.engine import dynamics, fastpath, kinematics, step_backends, variational
from mbde_core.engine.ali3p import ALI3P
from mbde_core.engine.linalg import solve
from mbde_core.engine.rk4_single import rk4_step
from mbde_core.engine.state import MBState


def _extra(extra_zdd, N, g):
    return None if extra_zdd is None else np.asarray(extra_zdd, dtype=float).reshape(N, g)


class _Generic:
    """Integrator backend on (N, n) arrays and the public engine functions (no kernels)."""

    def __init__(self, mech):
        self.mech = mech

    @staticmethod
    def vec(x):
        return np.atleast_2d(np.asarray(x, dtype=float))

    @staticmethod
    def take(x, idx):
        return x[:, idx]

    axpy = staticmethod(step_backends.Batch.axpy)
    add = staticmethod(step_backends.Batch.add)
    sub = staticmethod(step_backends.Batch.sub)
    comb = staticmethod(step_backends.Batch.comb)

    @staticmethod
    def rmul(R, dz):
        return np.einsum("nij,nj->ni", R, dz)

    def context(self, q):
        return q, self.mech.phi_q(q)

    def rmatrix(self, ctx):
        return kinematics.r_matrix(self.mech, ctx[0], phi_q=ctx[1])

    def _stage(self, t, q, qd, v):
        ev = dynamics.evaluate(self.mech, t, q, qd, extra_zdd=v)
        return step_backends.Stage({"qd": qd, "zdd": ev.zdd, "qdd": ev.qdd, "R": ev.R, "rd": ev.rdzd}, lambda x: x)

    def start(self, t, q, qd, ctx, v=None):
        return self._stage(t, q, qd, v)

    def advance(self, t, guess, z, zd, v=None, full=True):
        mech = self.mech
        q, ok = kinematics.solve_position(mech, z, guess, t=t)
        qd = kinematics.velocity(mech, q, zd, phi_q=mech.phi_q(q), t=t)
        return q, ok, self._stage(t, q, qd, v)


def _run(mech, state, extra_zdd, algorithm):
    """Run ``algorithm(B, iz, q, qd, qdd, v) -> (q1, qd1, qdd1, ok, stage at q1)`` on the best backend.

    With generated kernels: one state on the scalar kernels; a small batch state by
    state on them (see :data:`fastpath.SMALL_BATCH`); a larger one batch-last, in chunks
    (see :func:`fastpath.chunk_size`; the states are independent). A scalar kernel's
    arithmetic exception (exactly singular block, non-finite state) hands the step to
    the batched or generic code, which decide as before. An unchunked batch returns the
    kernels' context at its result (``MBState.aux``) and starts from the given one.
    """
    K = fastpath.kernels(mech)
    q = np.asarray(state.q)
    if K is not None:
        if q.ndim == 1:
            try:
                return _run_single(mech, K, state, extra_zdd, algorithm)
            except fastpath.SCALAR_ERRORS:
                pass
        else:
            if 0 < q.shape[0] <= fastpath.SMALL_BATCH:
                try:
                    return _run_small(mech, K, state, extra_zdd, algorithm)
                except fastpath.SCALAR_ERRORS:
                    pass
            return _run_batch(mech, K, state, extra_zdd, algorithm)
    q, qd, qdd, single = state.batch()
    q1, qd1, qdd1, ok, _ = algorithm(_Generic(mech), mech.independent, q, qd, qdd, _extra(extra_zdd, q.shape[0], mech.dof))
    return MBState.make(q1, qd1, qdd1, ok, single)


def _run_single(mech, K, state, extra_zdd, algorithm):
    B = step_backends.Single(mech, K)
    v = None if extra_zdd is None else B.vec(extra_zdd)
    q1, qd1, qdd1, ok, _ = algorithm(B, K.iz, B.vec(state.q), B.vec(state.qd), None if state.qdd is None else B.vec(state.qdd), v)
    return MBState(np.array(q1), np.array(qd1), np.array(qdd1), bool(ok))


def _run_small(mech, K, state, extra_zdd, algorithm):
    B = step_backends.Single(mech, K)
    q, qd = np.asarray(state.q, dtype=float), np.asarray(state.qd, dtype=float)
    N = q.shape[0]
    qdd = None if state.qdd is None else np.asarray(state.qdd, dtype=float)
    v = None if extra_zdd is None else np.asarray(extra_zdd, dtype=float).reshape(N, mech.dof)
    res = [algorithm(B, K.iz, q[k].tolist(), qd[k].tolist(), None if qdd is None else qdd[k].tolist(),
                     None if v is None else v[k].tolist()) for k in range(N)]
    out = [np.array([r[i] for r in res], dtype=float).reshape(N, mech.n) for i in range(3)]
    return MBState(out[0], out[1], out[2], np.array([bool(r[3]) for r in res]))


def _run_batch(mech, K, state, extra_zdd, algorithm):
    N, n = np.shape(state.q)
    vec = step_backends.Batch.vec
    q, qd = vec(state.q), vec(state.qd)
    qdd = None if state.qdd is None else vec(state.qdd)
    v = None if extra_zdd is None else vec(np.asarray(extra_zdd, dtype=float).reshape(N, mech.dof))
    chunk = fastpath.chunk_size(N)
    if N <= chunk:
        aux = state.aux if isinstance(state.aux, step_backends.Context) and state.aux.N == N else None
        B = step_backends.Batch(mech, K, N, None if aux is None else (q, aux))
        q1, qd1, qdd1, ok, s1 = algorithm(B, K.independent, q, qd, qdd, v)
        return MBState(q1.T, qd1.T, qdd1.T, ok, s1.context(N))
    out = np.empty((3, n, N))
    ok = np.empty(N, dtype=bool)
    for a in range(0, N, chunk):
        c = slice(a, min(a + chunk, N))
        res = algorithm(step_backends.Batch(mech, K, c.stop - c.start), K.independent, q[:, c], qd[:, c],
                        None if qdd is None else qdd[:, c], None if v is None else v[:, c])
        out[0, :, c], out[1, :, c], out[2, :, c], ok[c] = res[:4]
    return MBState(out[0].T, out[1].T, out[2].T, ok)


def _start(B, t, iz, q, qd, qdd, v):
    """(a, rd) at the initial state: a = zdd (+ v), rd = R'zd (predictor curvature)."""
    ctx = B.context(q)
    if qdd is None:
        st = B.start(t, q, qd, ctx)
        a, rd = st.zdd, st.rd
    else:
        a = B.take(qdd, iz)
        rd = B.sub(qdd, B.rmul(B.rmatrix(ctx), a))  # qdd = R zdd + R'zd
    if v is not None:
        a = B.add(a, v)
    return a, rd


class _IndependentIntegrator:
    """Shared helpers of the R-matrix (independent-coordinate) integrators.

    Position problems start from second-order predictors (each step of the explicit
    integrators below knows R and R'zd at its last configuration), so one Newton
    iteration usually suffices; the convergence test |Phi| <= tol is unchanged.
    """

    implicit = False

    def _accel(self, mech, t, q, qd, v):
        """zdd (N, g) (+ v) for a batch (N, n)."""
        K = fastpath.kernels(mech)
        if K is None:
            return dynamics.evaluate(mech, t, q, qd, extra_zdd=v).zdd
        N = q.shape[0]
        if 0 < N <= fastpath.SMALL_BATCH:
            try:
                S = step_backends.Single(mech, K)
                rows = []
                for k in range(N):
                    x = q[k].tolist()
                    rows.append(S.start(t, x, qd[k].tolist(), S.context(x), None if v is None else v[k].tolist()).zdd)
                return np.array(rows, dtype=float).reshape(N, mech.dof)
            except fastpath.SCALAR_ERRORS:
                pass
        B = step_backends.Batch(mech, K, N)
        x = B.vec(q)
        return B.start(t, x, B.vec(qd), B.context(x), None if v is None else B.vec(v)).zdd.T

    def _assemble(self, mech, t, q_guess, z, zd):
        q, ok = kinematics.solve_position(mech, z, q_guess, t=t)
        J = None if fastpath.kernels(mech) is not None else mech.phi_q(q)
        qd = kinematics.velocity(mech, q, zd, phi_q=J, t=t)
        return q, qd, ok

    def _finish(self, mech, t1, q0, qd0, h, z1, zd1, single, ok_prev=True):
        q1, qd1, ok = self._assemble(mech, t1, q0 + h * qd0, z1, zd1)
        qdd1 = dynamics.forward(mech, t1, q1, qd1)[1]
        return MBState.make(q1, qd1, qdd1, ok & ok_prev, single)


class ExplicitEuler(_IndependentIntegrator):
    name = "euler"
    order = 1

    def step(self, mech, t, state: MBState, h, extra_zdd=None) -> MBState:
        def euler(B, iz, q, qd, qdd, v):
            a, rd = _start(B, t, iz, q, qd, qdd, v)
            z1 = B.axpy(B.take(q, iz), h, B.take(qd, iz))
            zd1 = B.axpy(B.take(qd, iz), h, a)
            # z1 is on the path z0 + s zd0 (zdd = 0) through q0: second-order predictor
            q1, ok, s1 = B.advance(t + h, B.axpy(B.axpy(q, h, qd), 0.5 * h * h, rd), z1, zd1)
            return q1, s1.qd, s1.qdd, ok, s1

        return _run(mech, state, extra_zdd, euler)


class RK4(_IndependentIntegrator):
    name = "rk4"
    order = 4

    def step(self, mech, t, state: MBState, h, extra_zdd=None) -> MBState:
        K = fastpath.kernels(mech)
        if K is not None and not mech.drivers and np.ndim(state.q) == 1:
            # one state: the same algorithm written on the scalar kernels (rk4_single)
            vec = step_backends.Single.vec
            try:
                q1, qd1, qdd1, ok, _ = rk4_step(mech, K, t, vec(state.q), vec(state.qd),
                                                None if state.qdd is None else vec(state.qdd), h,
                                                None if extra_zdd is None else vec(extra_zdd))
                return MBState(np.array(q1), np.array(qd1), np.array(qdd1), bool(ok))
            except fastpath.SCALAR_ERRORS:
                pass  # the generic code decides

        def rk4(B, iz, q, qd, qdd, v):
            z0, zd0 = B.take(q, iz), B.take(qd, iz)
            a1, rd = _start(B, t, iz, q, qd, qdd, v)
            # stage 2: z0 + h/2 zd0 is on the path z0 + s zd0 (zdd = 0) through q0
            z2, zd2 = B.axpy(z0, 0.5 * h, zd0), B.axpy(zd0, 0.5 * h, a1)
            q2, ok2, s2 = B.advance(t + 0.5 * h, B.axpy(B.axpy(q, 0.5 * h, qd), 0.125 * h * h, rd), z2, zd2, v, False)
            # stage 3: z3 - z2 = O(h^2): first order from q2
            z3, zd3 = B.axpy(z0, 0.5 * h, zd2), B.axpy(zd0, 0.5 * h, s2.zdd)
            q3, ok3, s3 = B.advance(t + 0.5 * h, B.add(q2, B.rmul(s2.R, B.sub(z3, z2))), z3, zd3, v, False)
            # stage 4: z4 - z3 = h/2 zd3 + O(h^3): second order from q3
            z4, zd4 = B.axpy(z0, h, zd3), B.axpy(zd0, h, s3.zdd)
            guess = B.axpy(B.add(q3, B.rmul(s3.R, B.sub(z4, z3))), 0.125 * h * h, s3.rd)
            q4, ok4, s4 = B.advance(t + h, guess, z4, zd4, v, False)
            # result: z1 - z4 = O(h^2): first order from q4
            z1 = B.comb(z0, h / 6.0, (zd0, zd2, zd3, zd4))
            zd1 = B.comb(zd0, h / 6.0, (a1, s2.zdd, s3.zdd, s4.zdd))
            q1, ok, s1 = B.advance(t + h, B.add(q4, B.rmul(s4.R, B.sub(z1, z4))), z1, zd1)
            return q1, s1.qd, s1.qdd, ok & ok2 & ok3 & ok4, s1

        return _run(mech, state, extra_zdd, rk4)


class Trapezoidal(_IndependentIntegrator):
    """Implicit trapezoidal rule on x = [z, zd]; Newton on zd1 with a finite-difference Jacobian."""

    name = "trapezoidal"
    order = 2
    implicit = True

    def __init__(self, tol: float = 1e-12, max_iter: int = 20):
        self.tol = tol
        self.max_iter = max_iter

    def step(self, mech, t, state: MBState, h, extra_zdd=None) -> MBState:
        q, qd, qdd, single = state.batch()
        iz = mech.independent
        g = mech.dof
        N = q.shape[0]
        v = _extra(extra_zdd, N, g)
        z0, zd0 = q[:, iz], qd[:, iz]
        a0 = qdd[:, iz] if qdd is not None else self._accel(mech, t, q, qd, None)
        if v is not None:
            a0 = a0 + v
        t1 = t + h
        guess = q + h * qd

        def residual(zd1, q_guess):
            z1 = z0 + 0.5 * h * (zd0 + zd1)
            q1, qd1, ok = self._assemble(mech, t1, q_guess, z1, zd1)
            a1 = self._accel(mech, t1, q1, qd1, v)
            return zd1 - zd0 - 0.5 * h * (a0 + a1), q1, ok

        zd1 = zd0 + h * a0
        G, q1, ok = residual(zd1, guess)
        scale = np.maximum(np.abs(zd0), 1.0)
        for _ in range(self.max_iter):
            if np.all(np.abs(G) <= self.tol * scale):
                break
            eps = 1e-7 * np.maximum(np.abs(zd1), 1.0)
            Jac = np.empty((N, g, g))
            for k in range(g):
                dz = zd1.copy()
                dz[:, k] += eps[:, k]
                Gk, _, _ = residual(dz, q1)
                Jac[:, :, k] = (Gk - G) / eps[:, k : k + 1]
            zd1 = zd1 - solve(Jac, G)
            G, q1, ok = residual(zd1, q1)
        z1 = z0 + 0.5 * h * (zd0 + zd1)
        return self._finish(mech, t1, q, qd, h, z1, zd1, single, ok)


class _Variational:
    """Constrained variational integrators (see :mod:`mbde_core.engine.variational`)."""

    implicit = True
    midpoint = True

    def __init__(self, tol: float = 1e-10, max_iter: int = 25):
        self.tol = tol  # on the last Newton step |dz| (times max(1, length scale))
        self.max_iter = max_iter

    def params(self, mech, h):
        return variational.VIParams(h, self.midpoint, self.tol * max(1.0, mech.length_scale), self.max_iter)

    def step(self, mech, t, state: MBState, h, extra_zdd=None, extra_force=None) -> MBState:
        """``extra_force`` (n,) or (N, n): a generalized force held over the step
        (:mod:`variational`)."""
        return variational.run(mech, t, state, self.params(mech, h), extra_zdd, extra_force=extra_force)

    def step_noisy(self, mech, t, state: MBState, h, dz=None, dzd=None, extra_zdd=None) -> MBState:
        """The stochastic step of paper 002 eqs. 5-6: position increment dz = sigma dW1 and
        velocity increment dzd = gamma dW2 ((g,) or (N, g), or None)."""
        return variational.run(mech, t, state, self.params(mech, h), extra_zdd, dz, dzd)


class VariationalMidpoint(_Variational):
    name = "midpoint"
    order = 2
    midpoint = True


class SymplecticEuler(_Variational):
    name = "symplectic_euler"
    order = 1
    midpoint = False


def get_integrator(name: str, **kwargs):
    """Integrator by name: euler, rk4, trapezoidal, midpoint, symplectic_euler, ali3p."""
    table = {
        "euler": ExplicitEuler,
        "rk4": RK4,
        "trapezoidal": Trapezoidal,
        "midpoint": VariationalMidpoint,
        "symplectic_euler": SymplecticEuler,
        "ali3p": ALI3P,
    }
    if name not in table:
        raise KeyError(f"unknown integrator {name!r} (choose from {', '.join(table)})")
    return table[name](**kwargs)


INTEGRATOR_NAMES = ("euler", "rk4", "trapezoidal", "midpoint", "symplectic_euler", "ali3p")
