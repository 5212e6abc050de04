"""The vectorised RK4 step of a particle set (:mod:`mbde_core.engine.simd_source`): loading
its compiled module and running it on ranges of particles on a few threads.

:func:`rk4_step` has the contract of :func:`mbde_core.engine.numba_kernels.rk4_step` (which
calls it when :func:`enabled` and the mechanism's module builds), plus the generalized input forces ``u`` (N, k) on the
coordinates ``cols``. Particles the vector loop flags are stepped again by a path that
decides for them as the scalar code would: ``REDO`` (a position problem not converged in
the loop's two Newton iterations: rare, near singular configurations) by the scalar RK4 of
:mod:`mbde_core.engine.rk4_single` one particle at a time, or by the numpy path when there
are many; ``BAD`` (a non-finite value) by the numpy path, which applies its rules. Both
fallbacks give the results of the code they replace to rounding.

Threads: the set is cut into ``threads`` contiguous ranges (boundaries N i / threads),
the calling thread steps the first and a pool (:mod:`mbde_core.engine.thread_pools`) the
others, each in ``rk4_block``, which releases the GIL. Each particle is computed alone from
its own inputs, so results do not depend on the thread count or the ranges (tested).

Compilation and cache: :mod:`mbde_core.engine.numba_cache` (the module text is written
under a name keyed by its SHA-256 and numba's version, its machine code cached by numba
next to it): ~5-15 s for the four-bar the first time on a machine, ~0.3 s to
load later. ``MBDE_PF_SIMD=0`` turns this path off (the scalar module's loop runs).
"""
from __future__ import annotations

import os

import numpy as np

from mbde_core.engine import fastpath, numba_cache, rk4_single, step_backends, thread_pools
from mbde_core.engine.integrators import MBState, get_integrator
from mbde_core.engine.numba_cache import SERIAL_MAX
from mbde_core.engine.simd_source import module_source

OK, BAD, REDO = 1, 2, 4
PREFIX = "mbde_simd_"
SCALAR_REDO_MAX = 16  # REDO particles stepped one by one in Python; more: the numpy path


def enabled() -> bool:
    """Whether the vectorised step is wanted (MBDE_PF_SIMD, default 1)."""
    return os.environ.get("MBDE_PF_SIMD", "1").strip() != "0"


def _source(mech, K, cols):
    memo = getattr(K, "_simd_source", None)
    if memo is None:
        memo = K._simd_source = {}
    if cols not in memo:
        try:
            memo[cols] = module_source(mech, K, cols)
        except ValueError:
            memo[cols] = None
    return memo[cols]


def load(mech, cols=()):
    """The compiled SIMD module of ``mech`` for inputs on ``cols`` (a namespace with
    ``rk4_block``, ``qdd_block``, ``ROUT``, ``NT``, ``RCONST``), or None."""
    K = fastpath.kernels(mech)
    if K is None or numba_cache.numba() is None:
        return None
    cols = tuple(int(c) for c in cols)
    mods = getattr(K, "_simd", None)
    if mods is None:
        mods = K._simd = {}
    if cols in mods:
        return mods[cols] or None
    src = _source(mech, K, cols)
    if src is None:
        mods[cols] = False
        return None
    text, nt, rconst = src
    mod = numba_cache.import_text(numba_cache.module_key(text, numba_cache.numba().__version__, PREFIX), text)
    mod.NT, mod.RCONST = nt, rconst
    mods[cols] = mod
    return mod


def cached(mech, cols=()) -> bool:
    """Whether the SIMD module of ``mech`` is loaded in this process or compiled on disk (its
    source and numba's index of ``rk4_block`` next to it); the disk is looked at once per
    mechanism kernels, ``cols`` and process (as numba_kernels.cached)."""
    K = fastpath.kernels(mech)
    if K is None:
        return False
    cols = tuple(int(c) for c in cols)
    if (getattr(K, "_simd", None) or {}).get(cols):
        return True
    return numba_cache.memo_on_disk(K, "_simd_on_disk", cols, lambda: _on_disk(mech, K, cols))


def _on_disk(mech, K, cols) -> bool:
    ver = numba_cache.version()
    src = _source(mech, K, cols) if ver else None
    return src is not None and numba_cache.on_disk(numba_cache.module_key(src[0], ver, PREFIX), ("rk4_block", "rk4_block_fresh"))


NS_PER_PARTICLE = 70.0  # CPU of the vectorised RK4 step per four-bar particle, one thread (module docstring)


def _run(fn, N, threads, args):
    """fn(*args, start, stop) over [0, N) in ``threads`` contiguous ranges (one below the
    break-even of a hand-off, :func:`mbde_core.engine.thread_pools.parts`, at NS_PER_PARTICLE)."""
    parts = thread_pools.parts(N, threads, NS_PER_PARTICLE, SERIAL_MAX)
    bounds = [N * i // parts for i in range(parts + 1)]
    pending = [thread_pools.pool("rk4", parts - 1).submit(fn, *args, bounds[i], bounds[i + 1]) for i in range(1, parts)]
    fn(*args, bounds[0], bounds[1])
    for f in pending:
        f.result()


def rk4_step(mech, t, q, qd, qdd, h, extra=None, threads: int = 1, u=None, cols=()):
    """One RK4 step of N particles: (q1, qd1, qdd1 (N, n) Fortran-ordered, ok (N,), Context at
    q1 or None). qdd (N, n) at (q, qd) without extra or None; extra (N, g) or None: acceleration
    added to zdd during the step; u (N, k) or None: generalized forces on the coordinates
    ``cols`` during the step. qdd1 is the model's acceleration at the result without extra and u."""
    cols = tuple(int(c) for c in cols) if u is not None else ()
    mod = load(mech, cols)
    K = fastpath.kernels(mech)
    N, n, g = q.shape[0], K.n, K.g
    f = fastpath.soa
    Q, QD = f(q, n), f(qd, n)
    tv = [tuple(float(x) for x in K.time_values(s)) for s in (t, t + 0.5 * h, t + h)]
    V = np.zeros((g, N)) if extra is None else f(extra, g)
    U = np.zeros((0, N)) if u is None else f(u, len(cols))
    O = np.empty((mod.ROUT, N))
    F = np.empty(N, dtype=np.uint8)
    if qdd is None:  # qdd at the start computed block by block in the same pass (rk4_block_fresh)
        QDD = None
        _run(mod.rk4_block_fresh, N, threads, (Q, QD, V, U, tv[0], tv[1], tv[2], float(h), O, F))
    else:
        QDD = f(qdd, n)
        _run(mod.rk4_block, N, threads, (Q, QD, QDD, V, U, tv[0], tv[1], tv[2], float(h), O, F))
    oq, oqd, oqdd = O[:n], O[n:2 * n], O[2 * n:3 * n]
    a = 3 * n + mod.NT
    rows = iter(O[a:])
    R = [c if c is not None else next(rows) for c in mod.RCONST]
    ctx = step_backends.Context(N, tuple(O[3 * n:a]), None, tuple(tuple(R[i * g:(i + 1) * g]) for i in range(n)))
    ok = (F & OK).astype(bool)
    flagged = F & (BAD | REDO)
    if flagged.any():
        ctx = _fallback(mech, K, t, Q, QD, QDD, V, U, cols, h, flagged, oq, oqd, oqdd, ok, ctx)
        fastpath.finite_ok(ok, np.nonzero(flagged)[0], oq, oqd, oqdd)
    return oq.T, oqd.T, oqdd.T, ok, ctx


def _fallback(mech, K, t, Q, QD, QDD, V, U, cols, h, flagged, oq, oqd, oqdd, ok, ctx):
    """Recompute the flagged particles (module doc); returns the context (None if the numpy
    path ran: it does not give one)."""
    idx = np.nonzero(flagged)[0]
    if QDD is None:  # the fresh step kept its start qdd in the scratch: again for these (qdd_block's values)
        mod = load(mech, cols)
        sub = np.empty((K.n, idx.size))
        mod.qdd_block(np.ascontiguousarray(Q[:, idx]), np.ascontiguousarray(QD[:, idx]),
                      tuple(float(x) for x in K.time_values(t)), sub, 0, idx.size)
        QDD = np.zeros_like(Q)
        QDD[:, idx] = sub
    ez = _input_accelerations(mech, K, Q[:, idx], U[:, idx], cols) if len(cols) else 0.0
    Vi = V[:, idx] + ez
    if not (flagged[idx] & BAD).any() and len(idx) <= SCALAR_REDO_MAX:
        try:
            for j, p in enumerate(idx):
                q1, qd1, qdd1, okp, (tr1, _, R1, _, _) = rk4_single.rk4_step(
                    mech, K, t, Q[:, p].tolist(), QD[:, p].tolist(), QDD[:, p].tolist(), h, Vi[:, j].tolist())
                oq[:, p], oqd[:, p], oqdd[:, p], ok[p] = q1, qd1, qdd1, okp
                for row, val in zip(ctx.tr, tr1):
                    row[p] = val
                for rrow, vrow in zip(ctx.R, R1):
                    for x, y in zip(rrow, vrow):
                        if isinstance(x, np.ndarray):
                            x[p] = y
            return ctx
        except fastpath.SCALAR_ERRORS:
            pass
    st = get_integrator("rk4").step(mech, t, MBState(Q[:, idx].T, QD[:, idx].T, QDD[:, idx].T), h, extra_zdd=Vi.T)
    oq[:, idx], oqd[:, idx], oqdd[:, idx], ok[idx] = st.q.T, st.qd.T, st.qdd.T, st.ok
    return None


def _input_accelerations(mech, K, Q, U, cols):
    """Mbar^-1 R^T E u (g, k) of the input forces U (k_in, k) at the configurations Q (n, k):
    the fallbacks hold them over the step at their start value (the vector loop evaluates
    them at every stage; the difference is O(h) in the input's acceleration)."""
    k = Q.shape[1]
    V = K.vector
    with np.errstate(all="ignore"):
        tr = V.trig(Q)
        rows = V.rmatrix(V.jac(Q, tr), tr)
    R = np.empty((k, K.n, K.g))
    for i, row in enumerate(rows):
        for c, x in enumerate(row):
            R[:, i, c] = x
    Mbar = np.einsum("pia,ij,pjb->pab", R, np.asarray(mech.M, dtype=float), R)
    E = np.zeros((k, K.n))
    E[:, list(cols)] = U.T
    return np.linalg.solve(Mbar, np.einsum("pia,pi->pa", R, E)[..., None])[..., 0].T
