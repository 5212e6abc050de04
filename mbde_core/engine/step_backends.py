"""Integrator backends of the generated kernels (:mod:`mbde_core.engine.fastpath`): the same
algorithm text runs on one state or on a batch.

Vectors are lists of floats (:class:`Single`) or batch-last (k, N) arrays (:class:`Batch`).
``ctx`` is (tr, J) at a configuration. ``advance`` solves a position problem and runs the
generated ``post`` kernel there (velocity qd = R zd and the dynamics in one body),
returning a :class:`Stage` whose fields are converted to vectors only when used;
:class:`Context` carries the kernel values known at a batched step's result to the next
step.
"""
from __future__ import annotations

import numpy as np

from mbde_core.engine.fastpath import s_position, soa, stack, v_position

class Stage:
    """Kernel outputs at an assembled configuration: qd, zdd, qdd, R (n rows of g), rd = R'zd.

    ``raw`` holds the kernel's tuples; ``vec`` converts a tuple to the backend's vector.
    """

    __slots__ = ("raw", "_vec", "_cache")

    def __init__(self, raw, vec):
        self.raw, self._vec, self._cache = raw, vec, {}

    def _get(self, k):
        c = self._cache
        if k not in c:
            c[k] = self._vec(self.raw[k])
        return c[k]

    def context(self, N: int) -> "Context":
        """The kernel values at this stage's configuration, for the next step's start."""
        return Context(N, self.raw["tr"], self.raw["J"], self.raw["R"])

    qd = property(lambda self: self._get("qd"))
    zdd = property(lambda self: self._get("zdd"))
    qdd = property(lambda self: self._get("qdd"))
    rd = property(lambda self: self._get("rd"))
    R = property(lambda self: self.raw["R"])


class Context:
    """Kernel values at N assembled configurations (batch-last), known after a step.

    tr (sin, cos of the relative angles), J (the variable Jacobian entries; None: not
    kept, computed from q and tr when a step needs it) and R (n rows of g): what a
    batched step computed at its result q anyway. A step returns it
    as ``MBState.aux``; given back with that unchanged state, the next step starts
    from it instead of evaluating ``trig`` (the costliest kernel: two transcendental
    functions per angle), ``jac`` and ``rmatrix`` again. The values are those the
    kernels compute from q, so results do not change. Whoever edits q must drop it;
    :meth:`take` gathers it with the states (resampling).
    """

    __slots__ = ("N", "tr", "J", "R")

    def __init__(self, N, tr, J, R):
        self.N, self.tr, self.J, self.R = N, tr, J, R

    @property
    def ctx(self):
        return self.tr, self.J

    def take(self, idx) -> "Context":
        """The context of the states q[:, idx] (floats are constants: kept)."""
        f = lambda x: x[idx] if isinstance(x, np.ndarray) else x  # noqa: E731
        J = None if self.J is None else tuple(map(f, self.J))
        return Context(len(idx), tuple(map(f, self.tr)), J, tuple(tuple(map(f, r)) for r in self.R))

    def sincos(self, rel, col: int):
        """(sin, cos) (N,) of coordinate ``col`` (one of ``rel``, the relative angle columns)."""
        k = 2 * list(rel).index(int(col))
        return self.tr[k], self.tr[k + 1]


class Single:
    """Integrator backend for one state: vectors are lists of floats."""

    def __init__(self, mech, K):
        self.mech, self.K = mech, K

    @staticmethod
    def vec(x):
        return np.asarray(x, dtype=float).reshape(-1).tolist()

    @staticmethod
    def take(x, idx):
        return [x[i] for i in idx]

    @staticmethod
    def axpy(x, a, y):
        """x + a y."""
        return [xi + a * yi for xi, yi in zip(x, y)]

    @staticmethod
    def add(x, y):
        return [xi + yi for xi, yi in zip(x, y)]

    @staticmethod
    def sub(x, y):
        return [xi - yi for xi, yi in zip(x, y)]

    @staticmethod
    def comb(x, a, terms):
        """x + a (t0 + 2 t1 + 2 t2 + t3) (the RK4 update, in the generic code's order)."""
        t0, t1, t2, t3 = terms
        return [xi + a * (p + 2.0 * u + 2.0 * v + w) for xi, p, u, v, w in zip(x, t0, t1, t2, t3)]

    @staticmethod
    def rmul(R, dz):
        """R dz (n,) for R as n rows of g."""
        if len(dz) == 1:
            d = dz[0]
            return [row[0] * d for row in R]
        return [sum(r * d for r, d in zip(row, dz)) for row in R]

    def context(self, q):
        S = self.K.scalar
        tr = S.trig(q)
        return tr, S.jac(q, tr)

    def rmatrix(self, ctx):
        return self.K.scalar.rmatrix(ctx[1], ctx[0])

    def start(self, t, q, qd, ctx, v=None):
        """Stage at a given state (q, qd) (its dynamics, extra acceleration v added)."""
        tr, J = ctx
        if self.mech.drivers:
            return self.driven(t, q, qd, tr, J, v)
        zdd, qdd, R, rd = self.K.scalar.dynamics_t(J, tr, q, qd, self.K.time_values(t), v)
        return Stage({"zdd": zdd, "qdd": qdd, "R": R, "rd": rd}, list)

    def advance(self, t, guess, z, zd, v=None, full=True):
        """(q, ok, stage): position problem from ``guess``, then velocity and dynamics.

        ``guess`` may be overwritten. full: also qdd (else stage.qdd is unavailable).
        """
        K = self.K
        S = K.scalar
        drivers = self.mech.drivers
        q, ok, tr, J = s_position(self.mech, K, z, guess, 30, drivers.offset(t).tolist() if drivers else None)
        if drivers:
            qd = self.add(list(S.velocity(J, tr, zd)), self.particular(tr, J, drivers.rates(t)[0]))
            return q, ok, self.driven(t, q, qd, tr, J, v)
        qd, zdd, qdd, R, rd = S.post(J, tr, q, zd, K.time_values(t), v, full)
        return q, ok, Stage({"qd": qd, "zdd": zdd, "qdd": qdd, "R": R, "rd": rd}, list)

    def particular(self, tr, J, b):
        """x (n,): x[z] = 0, Phi_q,d x[d] = b (m,) -- the drivers' particular solutions."""
        x = [0.0] * self.K.n
        for c, val in zip(self.K.dep, self.K.scalar.dsolve(J, tr, [float(v) for v in b])):
            x[c] = val
        return x

    def driven(self, t, q, qd, tr, J, v=None):
        """Stage at (q, qd) of a mechanism with drivers: R^T M R zdd = R^T (Q - M (R'zd + s_a))
        and qdd = R zdd + R'zd + s_a (:mod:`mbde_core.model.drivers`)."""
        K = self.K
        sa = self.particular(tr, J, self.mech.drivers.rates(t)[1])
        Ms = (np.asarray(self.mech.M) @ np.array(sa)).tolist()
        Q = [a - b for a, b in zip(K.scalar.forces(q, qd, K.time_values(t)), Ms)]
        zdd, qdd, R, rd, _, _ = K.scalar.dynamics(J, tr, q, qd, Q, v)
        return Stage({"qd": qd, "zdd": zdd, "qdd": self.add(qdd, sa), "R": R, "rd": self.add(rd, sa)}, list)


class Batch:
    """Integrator backend for N states: vectors are batch-last (k, N) arrays."""

    def __init__(self, mech, K, N, known=None):
        """known: (q, Context) of the input state q (batch-last) if known, else None."""
        self.mech, self.K, self.N = mech, K, N
        self._stack = lambda vals: stack(vals, N)
        self._known = known

    @staticmethod
    def vec(x):
        return soa(x, np.shape(x)[-1])

    @staticmethod
    def take(x, idx):
        return x[idx]

    @staticmethod
    def axpy(x, a, y):
        return x + a * y

    @staticmethod
    def add(x, y):
        return x + y

    @staticmethod
    def sub(x, y):
        return x - y

    @staticmethod
    def comb(x, a, terms):
        t0, t1, t2, t3 = terms
        return x + a * (t0 + 2.0 * t1 + 2.0 * t2 + t3)

    def rmul(self, R, dz):
        """R dz (n, N), each row computed into the output (no stacking)."""
        g = len(dz)
        out = np.empty((len(R), self.N))
        for o, row in zip(out, R):
            if g == 1:
                np.multiply(row[0], dz[0], out=o)
            else:
                o[...] = sum(row[k] * dz[k] for k in range(g))
        return out

    def context(self, q):
        if self._known is not None and q is self._known[0]:
            c = self._known[1]
            if c.J is None:
                with np.errstate(all="ignore"):
                    c.J = self.K.vector.jac(q, c.tr)
            return c.ctx
        V = self.K.vector
        with np.errstate(all="ignore"):
            tr = V.trig(q)
            return tr, V.jac(q, tr)

    def rmatrix(self, ctx):
        if self._known is not None and ctx[1] is self._known[1].J:
            return self._known[1].R
        with np.errstate(all="ignore"):
            return self.K.vector.rmatrix(ctx[1], ctx[0])

    def start(self, t, q, qd, ctx, v=None):
        tr, J = ctx
        if self.mech.drivers:
            return self.driven(t, q, qd, tr, J, v)
        with np.errstate(all="ignore"):
            zdd, qdd, R, rd = self.K.vector.dynamics_t(J, tr, q, qd, self.K.time_values(t), v)
        return Stage({"zdd": zdd, "qdd": qdd, "R": R, "rd": rd}, self._stack)

    def advance(self, t, guess, z, zd, v=None, full=True):
        K = self.K
        V = K.vector
        drivers = self.mech.drivers
        with np.errstate(all="ignore"):
            q, ok, tr, J = v_position(self.mech, K, z, guess, 30, copy=False, offset=drivers.offset(t).tolist() if drivers else None)
            if drivers:
                qd = self._stack(V.velocity(J, tr, zd)) + self.particular(tr, J, drivers.rates(t)[0])
                st = self.driven(t, q, qd, tr, J, v)
                st.raw.update(tr=tr, J=J)
                return q, ok, st
            qd, zdd, qdd, R, rd = V.post(J, tr, q, zd, K.time_values(t), v, full)
        return q, ok, Stage({"qd": qd, "zdd": zdd, "qdd": qdd, "R": R, "rd": rd, "tr": tr, "J": J}, self._stack)

    def particular(self, tr, J, b):
        """x (n, N): x[z] = 0, Phi_q,d x[d] = b (m,) -- the drivers' particular solutions."""
        x = np.zeros((self.K.n, self.N))
        with np.errstate(all="ignore"):
            for c, val in zip(self.K.dep, self.K.vector.dsolve(J, tr, [float(v) for v in b])):
                x[c] = val
        return x

    def driven(self, t, q, qd, tr, J, v=None):
        """Stage at (q, qd) of a mechanism with drivers (see :meth:`Single.driven`)."""
        K = self.K
        sa = self.particular(tr, J, self.mech.drivers.rates(t)[1])
        with np.errstate(all="ignore"):
            Q = self._stack(K.vector.forces(q, qd, K.time_values(t))) - np.asarray(self.mech.M) @ sa
            zdd, qdd, R, rd, _, _ = K.vector.dynamics(J, tr, q, qd, tuple(Q), v)
        return Stage({"qd": qd, "zdd": zdd, "qdd": self._stack(qdd) + sa, "R": R, "rd": self._stack(rd) + sa},
                     lambda x: x if isinstance(x, np.ndarray) else self._stack(x))
