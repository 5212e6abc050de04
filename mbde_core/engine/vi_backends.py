"""Backends of the variational step (:mod:`mbde_core.engine.variational`): the vector and
matrix operations :func:`~mbde_core.engine.variational.vi_algorithm` is written in, on one
state (Python floats through the generated scalar kernels), on a batch (batch-last arrays
through the vector kernels) and, for mechanisms without kernels, on the generic engine
functions. Vectors hold n (or g) values; matrices n rows of g values (R, M R).
"""
from __future__ import annotations

import math
from operator import mul

import numpy as np

from mbde_core.engine import dynamics, fastpath, kinematics, step_backends


def solve_small(A, b):
    """x with A x = b for g <= 3 (Cramer; A[k][l], b[k] floats or (N,) arrays); a list."""
    g = len(b)
    if g == 1:
        return [b[0] / A[0][0]]
    if g == 2:
        det = A[0][0] * A[1][1] - A[0][1] * A[1][0]
        return [(A[1][1] * b[0] - A[0][1] * b[1]) / det, (A[0][0] * b[1] - A[1][0] * b[0]) / det]
    if g == 3:
        c00 = A[1][1] * A[2][2] - A[1][2] * A[2][1]
        c01 = A[1][2] * A[2][0] - A[1][0] * A[2][2]
        c02 = A[1][0] * A[2][1] - A[1][1] * A[2][0]
        c10 = A[0][2] * A[2][1] - A[0][1] * A[2][2]
        c11 = A[0][0] * A[2][2] - A[0][2] * A[2][0]
        c12 = A[0][1] * A[2][0] - A[0][0] * A[2][1]
        c20 = A[0][1] * A[1][2] - A[0][2] * A[1][1]
        c21 = A[0][2] * A[1][0] - A[0][0] * A[1][2]
        c22 = A[0][0] * A[1][1] - A[0][1] * A[1][0]
        det = A[0][0] * c00 + A[0][1] * c01 + A[0][2] * c02
        return [(c00 * b[0] + c10 * b[1] + c20 * b[2]) / det, (c01 * b[0] + c11 * b[1] + c21 * b[2]) / det,
                (c02 * b[0] + c12 * b[1] + c22 * b[2]) / det]
    Am = np.array([[A[k][l] for l in range(g)] for k in range(g)], dtype=float)
    bm = np.array([b[k] for k in range(g)], dtype=float)
    if Am.ndim == 2:
        return list(np.linalg.solve(Am, bm))
    return list(np.moveaxis(np.linalg.solve(np.moveaxis(Am, -1, 0), bm.T[..., None])[..., 0], 0, -1))


class SingleVI(step_backends.Single):
    """One state: lists of floats; matrices (R, M R) as g columns of n floats."""

    def __init__(self, mech, K):
        super().__init__(mech, K)
        self._M = [[float(x) for x in row] for row in np.asarray(mech.M, dtype=float)]
        self._Qg = [float(x) for x in mech.Q_gravity]
        self.g = mech.dof

    @staticmethod
    def of(mech, K) -> "SingleVI":
        """The backend of these kernels (built once)."""
        B = getattr(K, "_vi_single", None)
        if B is None or B.mech is not mech:
            B = SingleVI(mech, K)
            K._vi_single = B
        return B

    def position(self, t, z, guess):
        drivers = self.mech.drivers
        return fastpath.s_position(self.mech, self.K, z, guess, 30, drivers.offset(t).tolist() if drivers else None)

    def rmat(self, ctx):
        return list(zip(*self.K.scalar.rmatrix(ctx[1], ctx[0])))

    @staticmethod
    def rdot(R, x):
        """R x (n,)."""
        if len(x) == 1:
            a = x[0]
            return [a * r for r in R[0]]
        return [sum(map(mul, row, x)) for row in zip(*R)]

    def mmat(self, R):
        """M R."""
        return [[sum(map(mul, row, col)) for row in self._M] for col in R]

    @staticmethod
    def tdot(B, x):
        """B^T x (g,)."""
        return [sum(map(mul, col, x)) for col in B]

    @staticmethod
    def gram(B, R):
        """B^T R (g x g, rows)."""
        return [[sum(map(mul, b, r)) for r in R] for b in B]

    @staticmethod
    def matmul(A, R):
        """A R for a dense (n, n) numpy matrix A (loads' Jacobians)."""
        return (np.asarray(R, dtype=float) @ np.asarray(A).T).tolist()

    @staticmethod
    def scale(a, x):
        return [a * v for v in x]

    @staticmethod
    def mid(x, y):
        return [0.5 * (a + b) for a, b in zip(x, y)]

    @staticmethod
    def msub(A, c, X):
        """A - c X for g x g matrices."""
        return [[a - c * x for a, x in zip(ra, rx)] for ra, rx in zip(A, X)]

    @staticmethod
    def solve(A, b):
        return solve_small(A, b)

    @staticmethod
    def mv(A, x):
        """A x (g,) for a g x g matrix A (rows)."""
        return [sum(map(mul, row, x)) for row in A]

    def gravity(self):
        return self._Qg

    @staticmethod
    def small(dz, tol):
        """(all |dz| <= tol, per-state flag); NaN counts as done (the state fails later)."""
        done = not any(abs(v) > tol for v in dz)
        return done, done

    def forces(self, t, q, v):
        return list(self.K.scalar.forces(q, v, self.K.time_values(t)))

    def force_jacobians(self, t, q, v):
        return self.mech.force_jacobians(t, np.array(q), np.array(v))

    def post(self, t, q, ctx, zd):
        tr, J = ctx
        if self.mech.drivers:
            qd = self.add(list(self.K.scalar.velocity(J, tr, zd)), self.particular(tr, J, self.mech.drivers.rates(t)[0]))
            st = self.driven(t, q, qd, tr, J)
            return qd, st.zdd, st.qdd, st.R, st.rd
        return self.K.scalar.post(J, tr, q, zd, self.K.time_values(t), None, True)

    def drift(self, t, ctx):
        """The drivers' particular velocity s_v(t) at this configuration (n values)."""
        return self.particular(ctx[0], ctx[1], self.mech.drivers.rates(t)[0])

    @staticmethod
    def finite(x):
        return math.isfinite(sum(x))


class BatchVI(step_backends.Batch):
    """N states: batch-last (k, N) arrays; matrices (n, g, N)."""

    def __init__(self, mech, K, N, known=None):
        super().__init__(mech, K, N, known)
        self.M = np.asarray(mech.M, dtype=float)
        self.g = mech.dof

    def position(self, t, z, guess):
        drivers = self.mech.drivers
        with np.errstate(all="ignore"):
            return fastpath.v_position(self.mech, self.K, z, guess, 30, copy=False,
                                       offset=drivers.offset(t).tolist() if drivers else None)

    def rows(self, R):
        """(n, g, N) array of kernel rows (floats broadcast)."""
        out = np.empty((len(R), self.g, self.N))
        for i, row in enumerate(R):
            for k, v in enumerate(row):
                out[i, k] = v
        return out

    def rmat(self, ctx):
        return self.rows(self.rmatrix(ctx))

    @staticmethod
    def rdot(R, x):
        return np.einsum("ikN,kN->iN", R, x)

    def mmat(self, R):
        return np.einsum("ij,jkN->ikN", self.M, R)  # (BLAS matmul is slower for (n, n) x (n, g N))

    @staticmethod
    def tdot(B, x):
        return np.einsum("ikN,iN->kN", B, x)

    @staticmethod
    def gram(B, R):
        return np.einsum("ikN,ilN->klN", B, R)

    @staticmethod
    def matmul(A, R):
        """A R for A (N, n, n) (loads' Jacobians, batch-first) and R (n, g, N)."""
        return np.einsum("Nij,jkN->ikN", A, R)

    @staticmethod
    def scale(a, x):
        return a * x

    @staticmethod
    def mid(x, y):
        return 0.5 * (x + y)

    @staticmethod
    def msub(A, c, X):
        return A - c * X

    @staticmethod
    def solve(A, b):
        with np.errstate(all="ignore"):
            return np.array(solve_small(A, b))

    @staticmethod
    def mv(A, x):
        return np.einsum("klN,lN->kN", A, x)

    def gravity(self):
        return np.repeat(np.asarray(self.mech.Q_gravity, dtype=float)[:, None], self.N, axis=1)

    @staticmethod
    def small(dz, tol):
        flag = ~(np.abs(dz) > tol).any(axis=0)
        return bool(flag.all()), flag

    def forces(self, t, q, v):
        return self._stack(fastpath.v_forces(self.mech, self.K, t, q, v))

    def force_jacobians(self, t, q, v):
        return self.mech.force_jacobians(t, q.T, v.T)

    def post(self, t, q, ctx, zd):
        tr, J = ctx
        if self.mech.drivers:
            qd = self._stack(self.K.vector.velocity(J, tr, zd)) + self.drift(t, ctx)
            st = self.driven(t, q, qd, tr, J)
            return qd, st.zdd, st.qdd, st.R, st.rd
        with np.errstate(all="ignore"):
            qd, zdd, qdd, R, rd = self.K.vector.post(J, tr, q, zd, self.K.time_values(t), None, True)
        return self._stack(qd), self._stack(zdd), self._stack(qdd), R, rd

    def drift(self, t, ctx):
        return self.particular(ctx[0], ctx[1], self.mech.drivers.rates(t)[0])

    @staticmethod
    def finite(x):
        return np.isfinite(x).all(axis=0)


class GenericVI(BatchVI):
    """N states on the generic engine functions (mechanisms without kernels)."""

    def __init__(self, mech, N):
        step_backends.Batch.__init__(self, mech, None, N)
        self.M = np.asarray(mech.M, dtype=float)
        self.g = mech.dof

    def context(self, q):
        return q, None

    def rmat(self, ctx):
        return np.ascontiguousarray(np.moveaxis(kinematics.r_matrix(self.mech, ctx[0].T), 0, -1))

    def start(self, t, q, qd, ctx, v=None):
        ev = dynamics.evaluate(self.mech, t, q.T, qd.T, extra_zdd=None if v is None else v.T)
        return step_backends.Stage({"zdd": ev.zdd.T, "rd": ev.rdzd.T}, lambda x: x)

    def position(self, t, z, guess):
        q, ok = kinematics.solve_position(self.mech, z.T, guess.T, t=t)
        q = np.ascontiguousarray(q.T)
        return q, ok, q, None

    def forces(self, t, q, v):
        return np.ascontiguousarray(self.mech.forces(t, q.T, v.T).T)

    def post(self, t, q, ctx, zd):
        qd = kinematics.velocity(self.mech, q.T, zd.T, t=t)
        ev = dynamics.evaluate(self.mech, t, q.T, qd)
        return qd.T, ev.zdd.T, ev.qdd.T, None, None

    def drift(self, t, ctx):
        q = ctx[0]
        return kinematics.particular(self.mech, q.T, self.mech.drivers.rates(t)[0]).T
