"""The compiled kernels of one mechanism: the generated source of
:mod:`mbde_core.model.codegen` executed twice, with the ``scalar`` backend (``math``
functions on Python floats) and the ``vector`` backend (numpy ufuncs on (N,) rows), plus
the dense solves the generated code calls for dependent blocks of size >= 3 (``SOLVE``)
and the maps from a ``jac_values`` vector to dense Jacobian blocks. :func:`build` returns
None when :func:`~mbde_core.model.codegen.generate` does not support the structure.
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from mbde_core.engine.fastpath import soa
from mbde_core.engine.linalg import eliminate_batch_last
from mbde_core.model import codegen_ali3p
from mbde_core.model.codegen import generate

def _solve_dense_py(A, b):
    """Gaussian elimination with partial pivoting on Python floats (blocks of size >= 3)."""
    k = len(b)
    a = [list(row) + [bi] for row, bi in zip(A, b)]
    for col in range(k):
        piv = max(range(col, k), key=lambda r: abs(a[r][col]))
        if piv != col:
            a[col], a[piv] = a[piv], a[col]
        p = a[col][col]
        if p == 0.0:
            raise ZeroDivisionError("singular block")
        for r in range(col + 1, k):
            f = a[r][col] / p
            if f != 0.0:
                ar, ac = a[r], a[col]
                for c in range(col + 1, k + 1):
                    ar[c] -= f * ac[c]
    x = [0.0] * k
    for r in range(k - 1, -1, -1):
        acc = a[r][k]
        for c in range(r + 1, k):
            acc -= a[r][c] * x[c]
        x[r] = acc / a[r][r]
    return tuple(x)


def _solve_dense_np(A, b):
    """Batch-last elimination with partial pivoting: entries are (N,) arrays or floats."""
    k = len(b)
    N = max((np.size(v) for row in A for v in row), default=1)
    N = max(N, max(np.size(v) for v in b))
    At = np.empty((k, k, N))
    Bt = np.empty((k, 1, N))
    for i in range(k):
        for j in range(k):
            At[i, j] = A[i][j]
        Bt[i, 0] = b[i]
    X = eliminate_batch_last(At, Bt)
    return tuple(X[i, 0] for i in range(k))


_SCALAR_NS = {"sin": math.sin, "cos": math.cos, "sqrt": math.sqrt, "SOLVE": _solve_dense_py, "__builtins__": {}}
_VECTOR_NS = {"sin": np.sin, "cos": np.cos, "sqrt": np.sqrt, "SOLVE": _solve_dense_np, "__builtins__": {}}

# Mechanism attributes the generated code depends on (replacing one marks it stale)
KERNEL_INPUTS = frozenset({"M", "Q_gravity", "independent", "dependent", "keep_rows", "constraints", "loads",
                           "spec", "fixed_xy", "px", "py", "rel_columns", "n"})

_FUNCS = ("trig", "phi", "jac", "phijac", "jac_values", "jdot", "newton_step", "dsolve", "velocity", "acceleration", "rmatrix",
          "forces", "dynamics", "dynamics_t", "post") + codegen_ali3p.FUNCS


class Kernels:
    """Compiled kernels of one mechanism (see the module docstring).

    Attributes: ``scalar`` and ``vector`` (namespaces of the generated functions),
    ``source`` (the generated text), ``jac_rows``/``jac_cols`` (pattern of
    ``jac_values``), ``blocks`` (diagonal blocks of Phi_q,d as (kept rows, columns)),
    ``angles_fixed`` (every relative angle is an independent coordinate, so ``tr`` is
    constant while solving the position problem), ``time_fns`` (the loads' time
    functions, evaluated by :meth:`time_values`) and ``has_loads``.
    """

    def __init__(self, mech, source: str, meta: dict):
        self.source = source
        self.n, self.m, self.g = mech.n, len(mech.keep_rows), mech.dof
        self.independent = np.array(mech.independent, dtype=np.intp)
        self.dependent = np.array(mech.dependent, dtype=np.intp)
        d = [int(i) for i in mech.dependent]  # rows of q[dependent] as a slice if contiguous
        self.dep_rows = slice(d[0], d[-1] + 1) if d and d == list(range(d[0], d[-1] + 1)) else self.dependent
        self.iz = [int(i) for i in mech.independent]
        self.dep = [int(i) for i in mech.dependent]
        pat = meta["pattern"]
        self.jac_rows = np.array([r for r, _ in pat], dtype=np.intp)
        self.jac_cols = np.array([c for _, c in pat], dtype=np.intp)
        self.jac_flat = self.jac_rows * self.n + self.jac_cols
        # entries of jac_values in the dependent (m x m) and independent (m x g) blocks
        dep_pos = {c: k for k, c in enumerate(self.dep)}
        iz_pos = {c: k for k, c in enumerate(self.iz)}
        self._dep_sel = [k for k, c in enumerate(self.jac_cols) if int(c) in dep_pos]
        self._dep_flat = np.array([self.jac_rows[k] * self.m + dep_pos[int(self.jac_cols[k])] for k in self._dep_sel], dtype=np.intp)
        self._iz_sel = [k for k, c in enumerate(self.jac_cols) if int(c) in iz_pos]
        self._iz_flat = np.array([self.jac_rows[k] * self.g + iz_pos[int(self.jac_cols[k])] for k in self._iz_sel], dtype=np.intp)
        self.blocks = meta["blocks"]
        self.time_fns = meta["time_fns"]
        self.has_loads = bool(mech.spec.loads)
        rel = set(int(c) for c in mech.rel_columns)
        self.angles_fixed = rel.issubset(set(self.iz))
        code = compile(source, f"<mbde kernels: {mech.name}>", "exec")
        self.scalar = SimpleNamespace(**self._exec(code, _SCALAR_NS))
        self.vector = SimpleNamespace(**self._exec(code, _VECTOR_NS))

    @staticmethod
    def _exec(code, ns):
        env = dict(ns)
        exec(code, env)  # noqa: S102 - our own generated source
        return {k: env.get(k) for k in _FUNCS}  # the ALI3-P kernels may be absent

    def dense_dependent(self, values) -> np.ndarray:
        """Dense Phi_q,d (m, m) from the output of a scalar ``jac_values``."""
        out = np.zeros(self.m * self.m)
        out[self._dep_flat] = [values[k] for k in self._dep_sel]
        return out.reshape(self.m, self.m)

    def dense_independent(self, values) -> np.ndarray:
        """Dense Phi_q,z (m, g) from the output of a scalar ``jac_values``."""
        out = np.zeros(self.m * self.g)
        out[self._iz_flat] = [values[k] for k in self._iz_sel]
        return out.reshape(self.m, self.g)

    def time_values(self, t: float) -> tuple:
        return tuple(f(t) for f in self.time_fns) if self.time_fns else ()

    def evaluate(self, name: str, q, qd=None, t=None) -> np.ndarray:
        """Phi ('phi'), (Phi_q)' qd ('jdot') or Q ('forces') by the generated kernels."""
        q = np.asarray(q, dtype=float)
        n = self.n
        if q.ndim == 1:
            S = self.scalar
            x = q.tolist()
            if name == "forces":
                v = np.asarray(qd, dtype=float).reshape(n).tolist()
                return np.array(S.forces(x, v, self.time_values(t)))
            tr = S.trig(x)
            if name == "phi":
                return np.array(S.phi(x, tr))
            return np.array(S.jdot(x, np.asarray(qd, dtype=float).reshape(n).tolist(), tr))
        V = self.vector
        N = q.shape[0]
        x = soa(q, n)
        with np.errstate(all="ignore"):
            if name == "forces":
                vals = V.forces(x, np.ascontiguousarray(np.asarray(qd, dtype=float).reshape(N, n).T), self.time_values(t))
            elif name == "phi":
                vals = V.phi(x, V.trig(x))
            else:
                vals = V.jdot(x, np.ascontiguousarray(np.asarray(qd, dtype=float).reshape(N, n).T), V.trig(x))
        out = np.empty((N, len(vals)))
        for k, v in enumerate(vals):
            out[:, k] = v
        return out

    def dense_jacobian(self, q) -> np.ndarray:
        """Dense Phi_q (m, n) or (N, m, n) from the generated structural non-zeros."""
        q = np.asarray(q, dtype=float)
        m, n = self.m, self.n
        if q.ndim == 1:
            S = self.scalar
            x = q.tolist()
            out = np.zeros(m * n)
            out[self.jac_flat] = S.jac_values(x, S.trig(x))
            return out.reshape(m, n)
        V = self.vector
        N = q.shape[0]
        x = soa(q, n)
        with np.errstate(all="ignore"):
            vals = V.jac_values(x, V.trig(x))
        out = np.zeros((N, m * n))
        for f, v in zip(self.jac_flat, vals):
            out[:, f] = v
        return out.reshape(N, m, n)


def build(mech) -> Kernels | None:
    """Kernels of a fully constructed Mechanism, or None if its structure is unsupported."""
    out = generate(mech)
    if out is None:
        return None
    source, meta = out
    return Kernels(mech, source, meta)
