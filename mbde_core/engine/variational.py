"""Variational integrators of the constrained multibody equations (paper 002 sec. 2).

The constrained discrete Euler-Lagrange equations in position-momentum form (RATTLE;
Marsden & West 2001) in natural coordinates q with holonomic constraints Phi(q) = 0::

    M (q1 - q0) = h p0 + c_h F - Phi_q(q0)^T lambda',      Phi(q1) = 0
    p1 = M (q1 - q0) / h + c_p F,      qd1 = the M-orthogonal projection of M^-1 p1

with, for the ``midpoint`` rule (2nd order, L_d = h L((q0+q1)/2, (q1-q0)/h), paper 002
eq. 6), F = F(t + h/2, (q0+q1)/2, (q1-q0)/h), c_h = h^2/2, c_p = h/2, and for the
``symplectic_euler`` rule (1st order, paper 002 eq. 5), F = F(t + h, q1, (q1-q0)/h),
c_h = 0, c_p = h. F = gravity + loads (+ an extra force).

Reduced form (how it is solved). The first equation holds iff its residual is normal
to the constraint manifold at q0, i.e. orthogonal to the columns of R0 = R(q0) (qd =
R zd spans the tangent space). With z1 the independent coordinates of q1 and q1 = q(z1)
the position problem's solution::

    r(z1) = R0^T [M (q1 - q0) - c_h F] - Mbar0 w = 0,      w = h zd0
    pz1 = R1^T [M (q1 - q0) / h + c_p F],                 zd1 = Mbar1^-1 pz1

(Mbar = R^T M R, pz = R^T p the momentum conjugate to z). These are the discrete
Euler-Lagrange equations of the reduced discrete Lagrangian L_d(q(z0), q(z1)): the map
(z0, pz0) -> (z1, pz1) is symplectic, and q1 satisfies the constraints exactly. Newton
on the g unknowns z1 uses the matrix

    A = dr/dz1 = R0^T [M - c_h (dF/dq1)] R1,   dF/dq1 = K/2 + C/h (midpoint) | K ... (SE: 0)

(K = dQ/dq, C = dQ/dqd; A = (M R0)^T R1 without position/velocity-dependent loads), the
second-order predictor z1 = z0 + w + h^2/2 (zdd0 + v), and stops when |dz| <= ``tol``
(each iteration solves the position problem from q1 + R1 dz; the last one's step is
quadratically small). The same A, mapped through R, is the implicit-function-theorem
Jacobian of the step (:mod:`mbde_core.engine.vi_linearize`).

Stochastic step (paper 002 eqs. 5-6, Milstein et al. 2002 additive noise): a position
increment s1 = sigma dW1 (g,) on z and a velocity increment s2 = gamma dW2 (g,) on zd,
entering the momentum as the impulse Mbar s2 (for the midpoint rule half before and half
after the step, which reproduces eq. 6 exactly for a separable Hamiltonian; for the
symplectic Euler rule after the step, eq. 5)::

    midpoint:  w = h zd0 + s1 + h s2 / 2,   zd1 = Mbar1^-1 R1^T [M (q1 - q0 - R0 s1)/h + h/2 F] + s2/2
    SE:        w = h zd0 + s1,              zd1 = Mbar1^-1 R1^T [M (q1 - q0 - R0 s1)/h + h F] + s2

(the discrete velocity in F is (q1 - q0 - R0 s1)/h). ``extra_zdd`` v (g,) is the
constant extra force M R0 v during the step, which changes zdd by v (paper 000 eq. 11);
``extra_force`` fe (n,) a generalized force held over the step (a motor torque E u on
its coordinate: it enters both residuals as itself, R0^T fe and R1^T fe, where
M R0 Mbar0^-1 R0^T fe, the same force as an acceleration at q0, would enter the momentum
at q1 as R1^T M R0 Mbar0^-1 R0^T fe: 1e-3 rad/s per 1 ms step at 2 N m and 60 rad/s on
the paper-004 slider-crank, a drift the size of the plant noise).

Speed: the same algorithm text runs on one state (Python floats through the generated
scalar kernels), on a batch (batch-last arrays through the vector kernels; M R0, Mbar0
and R0^T F are computed once per step, the kernel context of the result is returned as
``MBState.aux`` and reused by the next step) and, for mechanisms without kernels, on the
generic engine functions (the backends: :mod:`mbde_core.engine.vi_backends`).
"""
from __future__ import annotations

import numpy as np

from mbde_core.engine import fastpath, step_backends
from mbde_core.engine.state import MBState
from mbde_core.engine.vi_backends import BatchVI, GenericVI, SingleVI


class VIParams:
    """One step's settings: h, midpoint (else symplectic Euler), tolerance, iterations."""

    __slots__ = ("h", "midpoint", "tol", "max_iter")

    def __init__(self, h, midpoint, tol, max_iter):
        self.h, self.midpoint, self.tol, self.max_iter = float(h), bool(midpoint), float(tol), int(max_iter)

    @property
    def c_h(self):
        return 0.5 * self.h * self.h if self.midpoint else 0.0

    @property
    def c_p(self):
        return 0.5 * self.h if self.midpoint else self.h


def vi_algorithm(B, iz, t, P: VIParams, q0, qd0, qdd0, v, s1, s2, fe=None):
    """One variational step on backend B: (q1, qd1, qdd1, ok, R1 kernel rows, ctx1).

    q0, qd0, qdd0 (or None): n values; v, s1, s2: g values or None; fe: n values or None,
    a generalized force held over the step (see the module docstring).
    """
    h = P.h
    mech = B.mech
    ctx0 = B.context(q0)
    R0 = B.rmat(ctx0)
    zd0 = B.take(qd0, iz)
    if qdd0 is None:
        st = B.start(t, q0, qd0, ctx0)
        zdd0, rd0 = st.zdd, st.rd
    else:
        zdd0 = B.take(qdd0, iz)
        rd0 = B.sub(qdd0, B.rdot(R0, zdd0))
    B0 = B.mmat(R0)
    w = B.scale(h, zd0)
    shift = None  # R0 s1: the position noise in natural coordinates
    if s1 is not None:
        w = B.add(w, s1)
        shift = B.rdot(R0, s1)
    if s2 is not None and P.midpoint:
        w = B.axpy(w, 0.5 * h, s2)
    Qe = None if v is None else B.rdot(B0, v)  # the extra force M R0 v
    if fe is not None:  # plus the generalized force fe
        Qe = fe if Qe is None else B.add(Qe, fe)
    loads = bool(mech.loads)
    stiff = P.midpoint and (mech.loads.position_dependent or mech.loads.velocity_dependent)
    tf = t + 0.5 * h if P.midpoint else t + h

    def force(q1):
        """(F, q, v): the force (n values) at the step's force point and its arguments."""
        dq = B.sub(q1, q0) if shift is None else B.sub(B.sub(q1, q0), shift)
        vel = B.scale(1.0 / h, dq)
        qa = B.mid(q0, q1) if P.midpoint else q1
        F = B.forces(tf, qa, vel) if loads else B.gravity()
        return (F if Qe is None else B.add(F, Qe)), qa, vel

    if not loads:  # constant force: no arguments to evaluate
        Fc = B.gravity() if Qe is None else B.add(B.gravity(), Qe)

        def force(q1):  # noqa: F811
            return Fc, None, None


    # the residual's constant part: R0^T M (h qd0) + Mbar0 (w - h zd0) (= Mbar0 w if qd0 = R0 zd0,
    # i.e. without drivers) (+ c_h R0^T F when F is constant)
    rhs0 = B.tdot(B0, B.scale(h, qd0))
    if s1 is not None or (s2 is not None and P.midpoint):
        rhs0 = B.add(rhs0, B.mv(B.gram(B0, R0), B.axpy(w, -h, zd0)))
    if P.midpoint and not loads:
        rhs0 = B.axpy(rhs0, P.c_h, B.tdot(R0, force(q0)[0]))
    # second-order predictor (z1 - z0 = w + h^2/2 zdd0 + O(h^3) for the midpoint rule)
    dz = B.axpy(w, P.c_h, zdd0 if v is None else B.add(zdd0, v)) if P.midpoint else w
    z1 = B.add(B.take(q0, iz), dz)
    guess = B.axpy(B.add(q0, B.rdot(R0, dz)), 0.5 * h * h, rd0)
    converged = False
    for _ in range(P.max_iter):
        q1, ok, tr1, J1 = B.position(t + h, z1, guess)
        R1 = B.rmat((tr1, J1))
        r = B.sub(B.tdot(B0, B.sub(q1, q0)), rhs0)
        A = B.gram(B0, R1)
        if P.midpoint and loads:
            F, qa, vel = force(q1)
            r = B.axpy(r, -P.c_h, B.tdot(R0, F))
            if stiff:
                Kq, C = B.force_jacobians(tf, qa, vel)
                A = B.msub(A, P.c_h, B.gram(R0, B.matmul(0.5 * Kq + C / h, R1)))
        step = B.solve(A, B.scale(-1.0, r))
        z1 = B.add(z1, step)
        guess = B.add(q1, B.rdot(R1, step))
        done, converged = B.small(step, P.tol)
        if done:
            break
    # the last step is quadratically small: this position problem converges at once
    q1, ok, tr1, J1 = B.position(t + h, z1, guess)
    F = force(q1)[0]
    dq = B.sub(q1, q0) if shift is None else B.sub(B.sub(q1, q0), shift)
    R1 = B.rmat((tr1, J1))
    B1 = B.mmat(R1)
    pz = B.axpy(B.scale(1.0 / h, B.tdot(B1, dq)), P.c_p, B.tdot(R1, F))
    if mech.drivers:  # pz = R^T M (R zd + s_v): remove the drivers' drift
        pz = B.sub(pz, B.tdot(B1, B.drift(t + h, (tr1, J1) if not isinstance(B, GenericVI) else (q1, None))))
    zd1 = B.solve(B.gram(B1, R1), pz)
    if s2 is not None:
        zd1 = B.axpy(zd1, 0.5 if P.midpoint else 1.0, s2)
    qd1, _, qdd1, Rrows, _ = B.post(t + h, q1, (tr1, J1), zd1)
    ok = ok & converged & B.finite(zd1)
    return q1, qd1, qdd1, ok, Rrows, (tr1, J1)


# ----------------------------------------------------------------------------------------
# layouts (as :func:`mbde_core.engine.integrators._run`)


def _noise(x, N, g):
    return None if x is None else np.asarray(x, dtype=float).reshape(N, g)


def run(mech, t, state, P: VIParams, extra_zdd=None, s1=None, s2=None, extra_force=None):
    """The step on the best backend: MBState (single: arrays (n,); batch: (N, n), with
    ``aux`` the kernel context at q1 when the batch ran in one piece)."""
    K = fastpath.kernels(mech)
    q = np.asarray(state.q, dtype=float)
    single = q.ndim == 1
    N, n, g = (1 if single else q.shape[0]), mech.n, mech.dof
    qd = np.asarray(state.qd, dtype=float).reshape(N, n)
    qdd = None if state.qdd is None else np.asarray(state.qdd, dtype=float).reshape(N, n)
    v, a, b = (_noise(x, N, g) for x in (extra_zdd, s1, s2))
    fe = _noise(extra_force, N, n)
    qb = q.reshape(N, n)
    if K is not None and N <= fastpath.SMALL_BATCH:
        try:
            S = SingleVI.of(mech, K)
            res = [vi_algorithm(S, K.iz, t, P, qb[k].tolist(), qd[k].tolist(), None if qdd is None else qdd[k].tolist(),
                                *(None if x is None else x[k].tolist() for x in (v, a, b, fe))) for k in range(N)]
            out = [np.array([r[i] for r in res], dtype=float).reshape(N, n) for i in range(3)]
            ok = np.array([bool(r[3]) for r in res])
            if single:
                return MBState(out[0][0], out[1][0], out[2][0], bool(ok[0]))
            return MBState(out[0], out[1], out[2], ok)
        except fastpath.SCALAR_ERRORS:
            pass  # the batched code decides (exactly singular, non-finite)
    vec = step_backends.Batch.vec
    args = [vec(qb), vec(qd), None if qdd is None else vec(qdd)] + [None if x is None else vec(x) for x in (v, a, b, fe)]
    if K is None:
        q1, qd1, qdd1, ok, _, _ = vi_algorithm(GenericVI(mech, N), mech.independent, t, P, *args)
        return MBState.make(q1.T, qd1.T, qdd1.T, ok, single)
    chunk = fastpath.chunk_size(N)
    if N <= chunk:
        aux = state.aux if isinstance(state.aux, step_backends.Context) and state.aux.N == N and not single else None
        B = BatchVI(mech, K, N, None if aux is None else (args[0], aux))
        q1, qd1, qdd1, ok, Rrows, (tr1, J1) = vi_algorithm(B, K.independent, t, P, *args)
        if single:
            return MBState.make(q1.T, qd1.T, qdd1.T, ok, True)
        return MBState(q1.T, qd1.T, qdd1.T, ok, step_backends.Context(N, tr1, J1, Rrows))
    out = np.empty((3, n, N))
    ok = np.empty(N, dtype=bool)
    for lo in range(0, N, chunk):
        c = slice(lo, min(lo + chunk, N))
        res = vi_algorithm(BatchVI(mech, K, c.stop - c.start), K.independent, t, P,
                           *(None if x is None else x[:, c] for x in args))
        out[0, :, c], out[1, :, c], out[2, :, c], ok[c] = res[:4]
    return MBState(out[0].T, out[1].T, out[2].T, ok)
