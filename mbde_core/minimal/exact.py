"""The exact minimal-coordinate map: the engine's position problem and the derivatives of R.

q = g_n(z) solves Phi(q) = 0 with q[independent] = z (Newton-Raphson from a guess, which
keeps the assembly branch). Differentiating Phi(g_n(z)) = 0 (D(u, v) = u^T Phi_qq v, the
symmetric bilinear form of :meth:`mbde_core.estimators.kalman.reduced.ReducedModel.bilinear_many`,
obtained by polarisation of the engine's (Phi_q)' qd; T(u, v, w) = Phi_qqq[u, v, w])::

    Phi_q g_i = 0                                  -> g_i   = R[:, i]          (velocity problem)
    Phi_q g_ij = -D(g_i, g_j)                      -> g_ij  = dR/dz           (acceleration problem)
    Phi_q g_ijk = -T(g_i, g_j, g_k) - D(g_ij, g_k) - D(g_ik, g_j) - D(g_jk, g_i)

each solved for the dependent rows (the independent rows of g_i are the identity, of the
higher derivatives zero). With zd the contraction g_ij zd_i zd_j is the engine's R'zd.

Single states with the mechanism's generated kernels (the ADE-KF's hot path, once per
filter step) run on Python floats (:meth:`ExactMap._evaluate_scalar`): the scalar Newton
iteration, R from the ``rmatrix`` kernel, D from ``jdot``, the solves with Phi_q,d from
``dsolve`` (block-triangular, no factorisation). Same formulas, equal to rounding; batches
and mechanisms without kernels use the numpy code.

Documented numerical scheme (third derivative only): the trilinear form T is the
directional derivative of the analytic D along w, T(u, v, w) = d/de D_{q + e w}(u, v),
by the fourth-order central stencil [8 (D(h) - D(-h)) - (D(2h) - D(-2h))] / (12 h) with
h = ``fd_step`` (1e-3 rad, or 1e-3 length scales for a length coordinate). It is exact
for the distance, rigid-body and slider constraints (quadratic or linear in q: T = 0) and
has a truncation error ~h^4 (~1e-12 relative) for the relative-angle constraints.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from mbde_core.engine import fastpath, kinematics
from mbde_core.minimal.jet import MapJet


class ExactMap:
    """g_n(z) and its derivatives from the engine (see the module docstring).

    mech: Mechanism. fd_step: relative step of the third-derivative stencil. The map keeps
    the last assembled single configuration as the default Newton guess (branch).
    """

    source = "exact"

    def __init__(self, mech, fd_step: float = 1e-3):
        self.mech = mech
        self.fd_step = float(fd_step)
        self.g = mech.dof
        self.angle = np.isin(mech.independent, mech.rel_columns)
        self._h = np.where(self.angle, self.fd_step, self.fd_step * mech.length_scale)
        self._last = mech.q0.copy()

    def describe(self) -> str:
        return "exact (position problem, R, dR/dz; d2R/dz2 with a 4th-order stencil on Phi_qqq)"

    # -- bilinear / trilinear forms ------------------------------------------------------------
    def _D(self, q, u, v, same: bool = False):
        """D(u, v) (..., m); same=True when u is v (one evaluation)."""
        f = self.mech.phi_q_dot_qd
        if same:
            return f(q, u)
        return 0.25 * (f(q, u + v) - f(q, u - v))

    def _T(self, q, u, v, w, h, same: bool):
        """T(u, v, w) = d/de D_{q + e w}(u, v) by the 4th-order central stencil."""
        d = lambda s: self._D(q + s * h * w, u, v, same)  # noqa: E731
        return (8.0 * (d(1.0) - d(-1.0)) - (d(2.0) - d(-2.0))) / (12.0 * h)

    # -- evaluation ------------------------------------------------------------------------------
    def evaluate(self, z, order: int = 3, q_guess=None) -> MapJet:
        """MapJet at z (g,) or (N, g) (always batched output, N = 1 for a single z).

        q_guess: (n,) or (N, n) Newton guess (default: the last single configuration, or
        the mechanism's initial one for batches). order: highest derivative (1, 2 or 3).
        """
        mech, g = self.mech, self.g
        z = np.asarray(z, dtype=float)
        single = z.ndim == 1 or z.shape[0] == 1
        if single:
            guess = self._last if q_guess is None else np.asarray(q_guess, dtype=float).reshape(-1)
            jet = self._evaluate_scalar(z.reshape(g), order, guess)
            if jet is not None:
                return jet
        if single:
            guess = self._last if q_guess is None else np.asarray(q_guess, dtype=float).reshape(-1)
            q, ok = kinematics.solve_position(mech, z.reshape(g), guess.copy())
            ok = np.array([ok])
            if ok[0]:
                self._last = q.copy()
        else:
            N = z.shape[0]
            guess = np.broadcast_to(mech.q0 if q_guess is None else np.asarray(q_guess, dtype=float), (N, mech.n)).copy()
            q, ok = kinematics.solve_position(mech, z, guess)
            ok = np.asarray(ok)
        lead = q.shape[:-1]
        dep, iz = mech.dependent, mech.independent
        Jphi = mech.phi_q(q)
        try:
            Jd_inv = np.linalg.inv(Jphi[..., dep])      # one factorisation for every derivative
        except np.linalg.LinAlgError:                   # singular configuration: flagged not ok
            Jd_inv = np.linalg.pinv(Jphi[..., dep])
            ok = np.zeros_like(np.atleast_1d(ok), dtype=bool)
        R = np.zeros(lead + (mech.n, g))
        R[..., iz, np.arange(g)] = 1.0
        R[..., dep, :] = -(Jd_inv @ Jphi[..., iz])
        H2 = H3 = None
        if order >= 2:
            H2 = np.zeros(lead + (mech.n, g, g))
            pairs = [(i, j) for i in range(g) for j in range(i, g)]
            rhs = np.stack([self._D(q, R[..., :, i], R[..., :, j], i == j) for i, j in pairs], axis=-1)
            sol = -(Jd_inv @ rhs)
            for c, (i, j) in enumerate(pairs):
                H2[..., dep, i, j] = sol[..., c]
                H2[..., dep, j, i] = sol[..., c]
        if order >= 3:
            H3 = np.zeros(lead + (mech.n, g, g, g))
            triples = list(itertools.combinations_with_replacement(range(g), 3))
            cache = {}

            def d2(ij, k):  # D(g_ij, g_k), shared by the permutations
                key = (tuple(sorted(ij)), k)
                if key not in cache:
                    cache[key] = self._D(q, H2[..., :, key[0][0], key[0][1]], R[..., :, k])
                return cache[key]

            cols = []
            for i, j, k in triples:
                t = self._T(q, R[..., :, i], R[..., :, j], R[..., :, k], self._h[k], i == j)
                cols.append(t + d2((i, j), k) + d2((i, k), j) + d2((j, k), i))
            sol = -(Jd_inv @ np.stack(cols, axis=-1))
            for c, idx in enumerate(triples):
                for perm in set(itertools.permutations(idx)):
                    H3[(Ellipsis, dep) + perm] = sol[..., c]
        return self._jet(q, R, H2, H3, ok)

    @staticmethod
    def _jet(q, R, H2, H3, ok) -> MapJet:
        if q.ndim == 1:
            q, R = q[None], R[None]
            H2 = None if H2 is None else H2[None]
            H3 = None if H3 is None else H3[None]
        return MapJet(q, R, H2, H3, ok)

    def _evaluate_scalar(self, z, order: int, guess):
        """:meth:`evaluate` of one z (g,) on the scalar kernels, or None (no kernels, drivers,
        an exactly singular block or non-finite values: the numpy code decides)."""
        mech, g = self.mech, self.g
        K = fastpath.kernels(mech)
        if K is None or getattr(mech, "drivers", None):
            return None
        S, n, dep = K.scalar, mech.n, K.dep
        try:
            x, ok, tr, Jk = fastpath.s_position(mech, K, z.tolist(), guess.tolist(), 30)
            if not ok:
                return None  # the numpy code reports the failure as before
            Rrows = S.rmatrix(Jk, tr)
            Rc = [[row[k] for row in Rrows] for k in range(g)]

            def D(u, v, same, at=None):
                qa, ta = (x, tr) if at is None else at
                if same:
                    return S.jdot(qa, u, ta)
                a = S.jdot(qa, [p + r for p, r in zip(u, v)], ta)
                b = S.jdot(qa, [p - r for p, r in zip(u, v)], ta)
                return [0.25 * (p - r) for p, r in zip(a, b)]

            def solved(rhs):  # full (n,) vector with Phi_q,d x_d = -rhs, zero independent rows
                out = [0.0] * n
                for c, v in zip(dep, S.dsolve(Jk, tr, [-r for r in rhs])):
                    out[c] = v
                return out

            H2 = H3 = None
            H2c = {}
            if order >= 2:
                H2 = np.zeros((n, g, g))
                for i in range(g):
                    for j in range(i, g):
                        H2c[(i, j)] = col = solved(D(Rc[i], Rc[j], i == j))
                        H2[:, i, j] = H2[:, j, i] = col
            if order >= 3:
                H3 = np.zeros((n, g, g, g))
                cache = {}

                def d2(ij, k):
                    key = (tuple(sorted(ij)), k)
                    if key not in cache:
                        cache[key] = D(H2c[key[0]], Rc[k], False)
                    return cache[key]

                for i, j, k in itertools.combinations_with_replacement(range(g), 3):
                    h, w = float(self._h[k]), Rc[k]
                    stencil = []
                    for sgn in (1.0, -1.0, 2.0, -2.0):
                        qs = [p + sgn * h * r for p, r in zip(x, w)]
                        stencil.append(D(Rc[i], Rc[j], i == j, (qs, S.trig(qs))))
                    t = [(8.0 * (a - b) - (c - e)) / (12.0 * h) for a, b, c, e in zip(*stencil)]
                    col = solved([a + b + c + e for a, b, c, e in zip(t, d2((i, j), k), d2((i, k), j), d2((j, k), i))])
                    for perm in set(itertools.permutations((i, j, k))):
                        H3[(slice(None),) + perm] = col
        except fastpath.SCALAR_ERRORS:
            return None
        if not all(map(math.isfinite, x)):
            return None
        q = np.array([x])  # the batch of one of _jet, built directly
        self._last = np.array(x)
        return MapJet(q, np.array([Rrows]).reshape(1, n, g), None if H2 is None else H2[None],
                      None if H3 is None else H3[None], np.array([True]))
