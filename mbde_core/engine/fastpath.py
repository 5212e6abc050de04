"""Fast paths of the engine on a mechanism's generated kernels.

:mod:`mbde_core.model.codegen` compiles, per mechanism, straight-line code for Phi,
Phi_q, (Phi_q)' qd, the solves with the dependent block, the generalized forces and the
R-matrix dynamics. This module runs the engine's algorithms on them in two layouts:

- single state: Python lists of floats through the ``scalar`` kernels (no numpy call
  inside a Newton iteration or a dynamics evaluation);
- batch: batch-last (structure of arrays) (n, N) arrays through the ``vector`` kernels:
  every generated statement is one numpy operation over all N states, on contiguous rows.

The public functions of :mod:`kinematics`, :mod:`dynamics` and the integrators dispatch
here when the mechanism has kernels (:func:`kernels`) and the call uses nothing the
kernels do not cover (an explicit ``phi_q``, another set of independent coordinates);
otherwise, and whenever a single-state kernel meets an arithmetic exception (exactly
singular block, infinite input), the generic numpy code runs. Both agree to rounding.

Batched results are returned as transposed views ``x.T`` of the batch-last arrays:
(N, n) arrays in Fortran order, so chaining steps never copies (``x.T`` of such an array
is again contiguous).
"""
from __future__ import annotations

import ctypes
import math
import os
import sys

import numpy as np

SCALAR_ERRORS = (ArithmeticError, ValueError)  # raised by math/float ops on bad input


def kernels(mech):
    """The mechanism's generated kernels, or None (generic code must be used)."""
    fast = getattr(mech, "_fast", None)
    return None if fast is None else fast()


# ----------------------------------------------------------------------------------------
# large batches and the C allocator
#
# A batched kernel call creates ~100 short-lived (N,) temporaries. With glibc's default
# malloc settings, freeing them shrinks the heap (trim threshold 128 kB) and the next
# ones grow it again: every temporary of N >~ 5000 values then costs page faults, which
# doubles the time of a batched RK4 step. ``tune_allocator`` raises the trim threshold
# (256 MB) and the mmap threshold (32 MB, glibc's own upper bound for its adaptive
# threshold) once per process, with two mallopt calls through ctypes; freed memory is
# then kept for reuse instead of being returned to the OS at once. Set the environment
# variable MBDE_MALLOC_TUNING=0 to leave the allocator alone: batches then run in chunks
# of CHUNK_UNTUNED states, whose temporaries stay small (slower, ~1.5x at N = 1e4).

# Batches of up to SMALL_BATCH states (e.g. a UKF's sigma points) run state by state on
# the scalar kernels: numpy's fixed cost per operation (~0.5 us) exceeds a whole scalar
# evaluation below ~12 states (measured crossover).
SMALL_BATCH = 12
CHUNK_TUNED = 65536  # bounds the temporaries' memory (~50 live (N,) arrays)
CHUNK_UNTUNED = 2048
_TUNED: bool | None = None


def tune_allocator() -> bool:
    """Apply the malloc settings above (glibc only, once); True if they are in effect."""
    global _TUNED
    if _TUNED is None:
        _TUNED = False
        if os.environ.get("MBDE_MALLOC_TUNING", "1") != "0" and sys.platform.startswith("linux"):
            try:
                libc = ctypes.CDLL(None)
                libc.gnu_get_libc_version  # noqa: B018 - glibc only
                m_trim_threshold, m_mmap_threshold = -1, -3
                _TUNED = bool(libc.mallopt(m_trim_threshold, 256 << 20)) and bool(libc.mallopt(m_mmap_threshold, 32 << 20))
            except (OSError, AttributeError):
                _TUNED = False
    return _TUNED


def chunk_size(N: int) -> int:
    """States per chunk for a batch of N (tunes the allocator for large batches)."""
    if N <= CHUNK_UNTUNED:
        return N
    return CHUNK_TUNED if tune_allocator() else CHUNK_UNTUNED


def soa(x, n: int) -> np.ndarray:
    """Batch-last (n, N) contiguous array of a batch (N, n) (free for our own outputs).

    Every batched entry point converts its input here, so large batches also tune the
    allocator (see above) before their first kernel call.
    """
    out = np.ascontiguousarray(np.asarray(x, dtype=float).reshape(-1, n).T)
    if out.shape[1] > CHUNK_UNTUNED and _TUNED is None:
        tune_allocator()
    return out


def phi_tol(mech) -> float:
    return 1e-14 * max(1.0, mech.length_scale**2)


def stack(vals, N: int) -> np.ndarray:
    """(k, N) array from k values, each an (N,) array or a float (broadcast)."""
    out = np.empty((len(vals), N))
    for k, v in enumerate(vals):
        out[k] = v
    return out


def maxabs(vals) -> float:
    """max |v| of floats, NaN if any is NaN (as numpy's max)."""
    m = 0.0
    for v in vals:
        a = abs(v)
        if a > m:
            m = a
        elif a != a:
            return a
    return m


# ----------------------------------------------------------------------------------------
# single state (lists of floats)


def s_position(mech, K, z, guess, max_iter: int, offset=None):
    """Newton-Raphson for the dependent coordinates, one state.

    z: g floats; guess: n floats; offset: the drivers' c(t) (m floats) or None (solves
    Phi_s(q) = c, :mod:`mbde_core.model.drivers`). Returns (q list, ok, tr, J) with the semantics of
    :func:`kinematics.solve_position`, tr and J (``jac``) at the returned q. Raises
    ArithmeticError/ValueError on an exactly singular block or non-finite input (the
    caller falls back to the generic code).
    """
    S = K.scalar
    q = list(guess)
    for k, c in enumerate(K.iz):
        q[c] = float(z[k])
    tol = phi_tol(mech)
    max_step = mech.length_scale
    dep = K.dep
    tr = S.trig(q)
    for it in range(max_iter + 1):
        if it and not K.angles_fixed:
            tr = S.trig(q)
        ph, J = S.phijac(q, tr)
        if offset is not None:
            ph = [p - c for p, c in zip(ph, offset)]
        if it == max_iter or not maxabs(ph) > tol:  # converged (NaN also stops: it never converges)
            break
        dq = S.newton_step(J, tr, ph)
        norm = maxabs(dq)
        if norm > max_step:
            f = max_step / norm
            dq = [d * f for d in dq]
        for c, d in zip(dep, dq):
            q[c] += d
    ok = maxabs(ph) <= 1e3 * tol and math.isfinite(sum(q))  # NaN fails both tests
    return q, ok, tr, J


def s_forces(mech, K, t, q, qd, extra_Q=None):
    """Q (n floats) = gravity + loads (+ extra_Q)."""
    Q = K.scalar.forces(q, qd, K.time_values(t))
    if extra_Q is not None:
        Q = [a + float(b) for a, b in zip(Q, extra_Q)]
    return Q


def s_dynamics(mech, K, t, q, qd, tr, J, extra_Q=None, ez=None):
    """Generated R-matrix dynamics of one state: (zdd, qdd, R, rdzd, Mbar, Qbar)."""
    return K.scalar.dynamics(J, tr, q, qd, s_forces(mech, K, t, q, qd, extra_Q), ez)


# ----------------------------------------------------------------------------------------
# batch (batch-last arrays)


def v_position(mech, K, Z, G, max_iter: int, copy: bool = True, offset=None):
    """Newton-Raphson for N states at once.

    Z: (g, N); G: (n, N) guesses (updated in place if not copy: a float64 C-contiguous
    temporary of the caller); offset: the drivers' c(t) (m floats) or None. Returns (q (n, N), ok (N,), tr). Each state iterates
    until |Phi| <= tol (then its update is zero), as :func:`kinematics.solve_position`.
    A state whose step is not finite (exactly singular block) takes the least-squares
    step instead, as the generic code does when LAPACK reports a singular matrix.
    The bookkeeping of the generic code (per-state convergence, step limit) runs only
    when needed: one reduction tells whether every step is finite and below the
    limit. The kernels' rows are never stacked on this fast path: the per-state
    residual comes from row-wise maxima (:func:`_row_maxabs`), the step is added row
    by row (zeroed first, with ``copyto(where=)``, for the states that converged).
    """
    V = K.vector
    q = np.array(G, dtype=float) if copy else G  # (n, N)
    N = q.shape[1]
    if K.g == 1:
        q[K.iz[0]] = Z[0]
    else:
        q[K.independent] = Z
    tol = phi_tol(mech)
    max_step = mech.length_scale
    tr = V.trig(q)
    with np.errstate(all="ignore"):
        for it in range(max_iter + 1):
            if it and not K.angles_fixed:
                tr = V.trig(q)
            ph, J = V.phijac(q, tr)
            if offset is not None:
                ph = tuple(p - c for p, c in zip(ph, offset))
            err = _row_maxabs(ph, N)  # per state; NaN if any residual is NaN
            if it == max_iter:
                break
            active = err > tol  # NaN counts as done (failed): it never converges
            if not active.any():
                break
            dq = V.newton_step(J, tr, ph)
            if _row_maxabs(dq, N).max(initial=0.0) <= max_step:  # every step finite and small
                done = None if active.all() else ~active
                for r, d in zip(K.dep, dq):
                    if done is not None:
                        np.copyto(d, 0.0, where=done)
                    q[r] += d
            else:
                q[K.dep_rows] += _limited_steps(mech, q, stack(ph, N), stack(dq, N), ~active, max_step)
        ok = (err <= 1e3 * tol) & np.isfinite(q).all(axis=0)
    return q, ok, tr, J


def _row_maxabs(rows, N: int) -> np.ndarray:
    """(N,) max_k |rows[k]| of kernel rows ((N,) arrays or floats); NaN propagates.

    Two operations per row into one buffer, instead of stacking the rows first."""
    first = rows[0]
    out = np.abs(first) if isinstance(first, np.ndarray) else np.full(N, abs(first))
    tmp = np.empty_like(out)
    for r in rows[1:]:
        np.abs(r, out=tmp)
        np.maximum(out, tmp, out=out)
    return out


def _limited_steps(mech, q, ph, dq, done, max_step):
    """Newton steps dq (m, N) made safe: least-squares steps where not finite, zero for
    converged states, limited to max_step (the generic code's rules)."""
    bad = ~np.isfinite(dq).all(axis=0) & ~done
    if bad.any():
        dq[:, bad] = _lstsq_steps(mech, q[:, bad], ph[:, bad])
    dq[:, done] = 0.0
    norm = np.max(np.abs(dq), axis=0)
    big = norm > max_step
    if big.any():
        dq[:, big] *= max_step / norm[big]
    return dq


def _lstsq_steps(mech, q, ph):
    """Least-squares Newton steps (m, k) for states q (n, k) with residuals ph (m, k)."""
    J = mech.constraints.jacobian(q.T, mech.points(q.T))
    if len(mech.keep_rows) != mech.constraints.m:
        J = J[:, mech.keep_rows]
    J = J[:, :, mech.dependent]
    out = np.zeros((J.shape[2], q.shape[1]))
    for k in range(q.shape[1]):
        out[:, k] = np.linalg.lstsq(J[k], -ph[:, k], rcond=None)[0]
    return out


def v_forces(mech, K, t, q, qd, extra_Q=None):
    """Q as n rows (arrays or floats) = gravity + loads (+ extra_Q (n, N))."""
    Q = K.vector.forces(q, qd, K.time_values(t))
    if extra_Q is not None:
        Q = tuple(a + b for a, b in zip(Q, extra_Q))
    return Q


def v_dynamics(mech, K, t, q, qd, tr, J, extra_Q=None, ez=None):
    """Generated R-matrix dynamics of N states (rows of q, qd (n, N))."""
    return K.vector.dynamics(J, tr, q, qd, v_forces(mech, K, t, q, qd, extra_Q), ez)


# ----------------------------------------------------------------------------------------
# integrator backends: the same algorithm text runs on one state or on a batch
#
# Vectors are lists of floats (Single) or batch-last (k, N) arrays (Batch). ``ctx`` is
# (tr, J) at a configuration. ``advance`` solves a position problem and runs the
# generated ``post`` kernel there (velocity qd = R zd and the dynamics in one body),
# returning a :class:`Stage` whose fields are converted to vectors only when used.


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

    tr (sin, cos of the relative angles), J (the variable Jacobian entries) and R (n
    rows of g): what a batched step computed at its result q anyway. A step returns it
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
        return Context(len(idx), tuple(map(f, self.tr)), tuple(map(f, self.J)), tuple(tuple(map(f, r)) for r in self.R))

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
            return self._known[1].ctx
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
