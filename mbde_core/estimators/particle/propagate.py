"""Propagation of a large particle set: fixed chunks, optionally on a thread pool.

A batched RK4 step over N particles evaluates the generated kernels (:mod:`mbde_core.
engine.fastpath`) as ~10^3 numpy operations on (N,) rows and keeps ~100 of them alive;
at N = 1e5 that working set (~80 MB) falls out of the caches and the throughput halves
(1.8e6 particle-steps/s at 1e4, 1.0e6 at 1e5 on the reference machine). Here the set is
cut into chunks of :func:`chunk_size` particles (boundaries 0, c, 2c, ...; c a function of
N alone: two chunks up to 2 x ``CHUNK_MAX``, then chunks of ``CHUNK_MAX``), each
stepped as its own batch with its own kernel context (``MBState.aux``: sines, Phi_q, R at
its result, reused by the next step), so the temporaries of a chunk stay in the
per-core cache. numpy releases the GIL inside every ufunc loop on float arrays, so
chunks run concurrently on ``threads`` worker threads (default: the machine's CPU
count, at most ``MAX_THREADS``; ``MBDE_PF_THREADS`` overrides it, 1 = in the calling
thread) -- the Python glue between ufuncs holds the GIL, which limits the gain to what
the measured table of ``mbde bench pf --only speed`` shows.

On the compiled backend (:func:`mbde_core.engine.numba_kernels.backend`: rk4 from 4096
particles, or when the mechanism's module is already compiled) a step is one call of
:func:`mbde_core.engine.numba_kernels.rk4_step` -- the vectorised loop of
:mod:`mbde_core.engine.simd_kernels` where the mechanism's module builds, else numba's
per-particle loop -- on ``threads`` contiguous ranges; the chunks below are the numpy path's.

Determinism: the position problem and the dynamics are per particle (a particle's
Newton iterations stop when *it* converges, :func:`fastpath.v_position`), so a particle's
result does not depend on the batch it is computed in; the chunks write disjoint slices
of preallocated outputs and no random number is drawn here. Results are therefore
bit-identical for any thread count and any chunk size (tested).
"""
from __future__ import annotations

import os

import numpy as np

from mbde_core.engine import fastpath, numba_kernels, step_backends, thread_pools
from mbde_core.engine.integrators import RK4, MBState

CHUNK_MIN = 2048
CHUNK_MAX = 16384
MAX_THREADS = 8


def chunk_size(N: int) -> int:
    """Particles per chunk for a set of N: half the set (two chunks, one per core of a
    2-core machine) within [CHUNK_MIN, CHUNK_MAX]; a function of N only, never of the
    thread count."""
    return int(min(CHUNK_MAX, max(CHUNK_MIN, -(-N // 2))))


def _finite(st: MBState) -> np.ndarray:
    """st.ok (N,) and every coordinate of q, qd, qdd finite."""
    ok = np.asarray(st.ok, dtype=bool)
    if ok.all() and np.isfinite(st.q).all() and np.isfinite(st.qd).all() and np.isfinite(st.qdd).all():
        return ok
    return ok & np.isfinite(st.q).all(axis=1) & np.isfinite(st.qd).all(axis=1) & np.isfinite(st.qdd).all(axis=1)


def default_threads() -> int:
    env = os.environ.get("MBDE_PF_THREADS", "").strip()
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            pass
    return max(1, min(os.cpu_count() or 1, MAX_THREADS))



class ChunkContext:
    """The kernel contexts of a chunked set (one :class:`step_backends.Context` per chunk),
    seen as one: N, R (rows of (N,) arrays), sincos(), take()."""

    def __init__(self, parts):
        self.parts = parts
        self.N = sum(p.N for p in parts)
        self._R = None

    def _cat(self, getter):
        vals = [getter(p) for p in self.parts]
        if not any(isinstance(v, np.ndarray) for v in vals):
            return vals[0]  # a constant entry (the same float in every chunk)
        return np.concatenate([v if isinstance(v, np.ndarray) else np.full(p.N, v) for v, p in zip(vals, self.parts)])

    @property
    def R(self):
        if self._R is None:
            first = self.parts[0].R
            self._R = tuple(tuple(self._cat(lambda p, i=i, k=k: p.R[i][k]) for k in range(len(first[i])))
                            for i in range(len(first)))
        return self._R

    def sincos(self, rel, col: int):
        s = [p.sincos(rel, col) for p in self.parts]
        return np.concatenate([a for a, _ in s]), np.concatenate([b for _, b in s])

    def whole(self) -> step_backends.Context:
        """One Context over the whole set (concatenated entries)."""
        p0 = self.parts[0]
        tr = tuple(self._cat(lambda p, i=i: p.tr[i]) for i in range(len(p0.tr)))
        J = None if any(p.J is None for p in self.parts) else tuple(self._cat(lambda p, i=i: p.J[i]) for i in range(len(p0.J)))
        return step_backends.Context(self.N, tr, J, self.R)


class Propagator:
    """Steps the particle set with an integrator (see the module docstring) and keeps the
    kernel context of the result for the next step."""

    def __init__(self, integrator, mech, threads: int | None = None, chunk: int | None = None):
        self.integrator = integrator
        self.mech = mech
        self.threads = default_threads() if threads is None else max(1, int(threads))
        self.chunk_fixed = None if chunk is None else int(chunk)
        self.chunk = CHUNK_MAX
        self.ctx = None  # a step_backends.Context (one chunk) or a ChunkContext, at the current q
        self.last = None  # the MBState of the last step (its caller can tell it came from here)
        self.backend = None  # 'numba' or 'numpy': what ran the last step
        self.steps_left = 0  # steps the caller still expects to run (0: unknown): numba_kernels.backend's work

    def drop(self) -> None:
        self.ctx = None

    def context(self, N: int):
        """The kernel context at the current q if known for N particles, else None."""
        c = self.ctx
        return c if c is not None and c.N == N else None

    def adopt(self, aux, N: int) -> None:
        self.ctx = aux if isinstance(aux, (step_backends.Context, ChunkContext)) and aux.N == N else None

    def take(self, idx) -> None:
        """Gather the context with the particles (resampling)."""
        c = self.ctx
        if c is None:
            return
        if isinstance(c, ChunkContext):
            c = c.whole()
        self.ctx = c.take(idx)

    def _chunk_contexts(self, N: int):
        """One context per chunk of the current set, or Nones."""
        c = self.ctx
        bounds = range(0, N, self.chunk)
        if c is None or c.N != N:
            return [None] * len(bounds)
        if isinstance(c, ChunkContext) and all(p.N == min(self.chunk, N - a) for p, a in zip(c.parts, bounds)) \
                and len(c.parts) == len(bounds):
            return list(c.parts)
        if isinstance(c, ChunkContext):
            c = c.whole()
        if len(bounds) == 1:
            return [c]
        return [c.take(np.arange(a, min(a + self.chunk, N))) for a in bounds]

    def step(self, t, q, qd, qdd, dt, extra=None) -> MBState:
        """All particles from t to t + dt; returns the MBState (its aux: the new context).
        Its ``ok`` is False for every particle with a non-finite q, qd or qdd (the
        compiled step flags those itself; the numpy path's are checked here)."""
        N = q.shape[0]
        left = self.steps_left
        self.steps_left = max(left - 1, 0)
        if type(self.integrator) is RK4 and numba_kernels.backend(self.mech, N, "rk4", N * left) == "numba":
            q1, qd1, qdd1, ok, ctx = numba_kernels.rk4_step(self.mech, t, q, qd, qdd, dt, extra, self.threads)
            st = self.last = MBState(q1, qd1, qdd1, ok, ctx)
            self.ctx, self.backend = ctx, "numba"
            return st
        self.backend = "numpy"
        self.chunk = self.chunk_fixed or chunk_size(N)
        if N <= self.chunk or fastpath.kernels(self.mech) is None:
            st = self.integrator.step(self.mech, t, MBState(q, qd, qdd, aux=self.context(N)), dt, extra_zdd=extra)
            st.ok = _finite(st)
            self.adopt(st.aux, N)
            self.last = st
            return st
        n = q.shape[1]
        ctxs = self._chunk_contexts(N)
        out = np.empty((3, n, N))
        ok = np.empty(N, dtype=bool)
        parts = [None] * len(ctxs)

        def run(k):
            a = k * self.chunk
            b = min(a + self.chunk, N)
            s = slice(a, b)
            st = self.integrator.step(self.mech, t, MBState(q[s], qd[s], None if qdd is None else qdd[s], aux=ctxs[k]),
                                      dt, extra_zdd=None if extra is None else extra[s])
            out[0, :, s], out[1, :, s], out[2, :, s] = st.q.T, st.qd.T, st.qdd.T
            ok[s] = _finite(st)
            parts[k] = st.aux

        if self.threads > 1:
            list(thread_pools.pool("pf", self.threads).map(run, range(len(ctxs))))
        else:
            for k in range(len(ctxs)):
                run(k)
        st = MBState(out[0].T, out[1].T, out[2].T, ok)
        if all(isinstance(p, step_backends.Context) for p in parts):
            self.ctx = ChunkContext(parts)
        else:
            self.ctx = None
        self.last = st
        return st
