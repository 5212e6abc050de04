"""Numba kernels of the particle filter's serial numpy passes (issue 13 item 3).

The weighted moments of ``estimate`` (eq. 19, the circular mean for angles, and the
covariance of [z, zd]) are several numpy passes over (N, g) arrays on one thread; here
they are two fused passes, parallel over particles (``prange``) when numba is importable
and the set is large (1e5 particles, four-bar: ~7.7 ms -> ~2 ms). The normalisation of
the log-weights was tried too and left in numpy: numba's scalar exp is slower than
numpy's vectorised one (1.7 ms against 0.7 ms at 1e5 on one thread).

Determinism: every reduction is split into a fixed number of blocks (:data:`pf_numba_kernels.BLOCKS`,
independent of the thread count), each block is summed sequentially and the block sums
are added in order, so a result depends only on the inputs (the same for 1 or 2 threads,
run to run). It is not bit-identical to numpy's pairwise/einsum sums: the agreement is
tested with tolerances (test/test_pf_numba_reductions.py; relative 1e-12 on sums of
positive terms). No random numbers are drawn here.

Selection: :func:`enabled` -- numba importable (:func:`mbde_core.engine.numba_kernels.numba`),
``MBDE_PF_BACKEND`` ``numba`` (any N) or ``auto`` and N >= :func:`min_n` (``MBDE_PF_MOMENTS_MIN``,
default :data:`MOMENTS_MIN`); otherwise the numpy code of the callers runs unchanged. The
kernels are compiled once per machine (``cache=True``). MOMENTS_MIN is not the propagation's
4096: the parallel loop runs on numba's ``workqueue`` layer, whose naps
(:mod:`mbde_core.engine.numba_kernels`) cost more than the work below ~65536 particles.
Four-bar filter, 1e4 particles, idle 2-core machine: the estimate 0.80-0.88 ms per step
on numba (one or two threads) against ~0.3 ms on numpy; at 1e5 numba is faster
(load ~2.8: 2.0 against 2.5 ms CPU).
"""
from __future__ import annotations

import os

import numpy as np

from mbde_core.engine import numba_kernels, thread_pools
from mbde_core.engine.numba_cache import SERIAL_MAX

_K = None  # the compiled kernels (namespace), False when numba is missing
MOMENTS_MIN = 65536  # particles from which the moments run on numba with ``auto`` (see above)
UPDATE_MIN = 4096  # particles from which the update kernels run with ``auto`` (the propagation's AUTO_MIN)


def min_n() -> int:
    try:
        return int(os.environ.get("MBDE_PF_MOMENTS_MIN", MOMENTS_MIN))
    except ValueError:
        return MOMENTS_MIN


def enabled(N: int) -> bool:
    """Whether the numba reductions run for N particles (see the module docstring)."""
    want = numba_kernels.requested()
    if want == "numpy" or (want != "numba" and N < min_n()):
        return False
    return kernels() is not None


def kernels():
    """The compiled kernels, or None when numba is not importable."""
    global _K
    if _K is None:
        nb = numba_kernels.numba()
        if nb is None:
            _K = False
        else:
            # lazy: imports numba (0.18 s of CPU) and compiles on first use; only when chosen
            from mbde_core.estimators.particle import compiled_kernels as pf_numba_kernels

            _K = pf_numba_kernels
    return _K or None


def _threads(K, threads):
    nb = numba_kernels.numba()
    nb.set_num_threads(max(1, min(int(threads), nb.config.NUMBA_NUM_THREADS)))


def moments(w, q, qd, qdd, v, sin_z, cos_z, iz, angular, threads: int = 1):
    """((zm, zdm, zddm) (g,) each, P (2g, 2g) without the kernel term) of a particle set;
    sin_z, cos_z (N, g): sin and cos of z (any values at non-angular columns)."""
    K = kernels()
    g = len(iz)
    mean, cov = np.empty((3, g)), np.empty((2 * g, 2 * g))
    args = (np.ascontiguousarray(w, dtype=float), q, qd, qdd, np.ascontiguousarray(v, dtype=float), sin_z, cos_z,
            np.ascontiguousarray(iz, dtype=np.int64), np.ascontiguousarray(angular, dtype=np.bool_), mean, cov)
    with numba_kernels._LOCK:
        _threads(K, threads)
        K.moments(*args)
    return (mean[0].copy(), mean[1].copy(), mean[2].copy()), cov


# -- the update and the resampling: nogil kernels on contiguous ranges on the thread pool ----

def update_enabled(N: int) -> bool:
    """Whether the update and resampling kernels (:func:`adapted_noise`, :func:`systematic`,
    :func:`gather`) run for N particles: numba importable, ``MBDE_PF_BACKEND`` ``numba`` (any
    N) or ``auto`` and N >= ``MBDE_PF_UPDATE_MIN`` (default :data:`UPDATE_MIN`); else the numpy
    code of the callers runs (the reference: the kernels are tested against it)."""
    want = numba_kernels.requested()
    if want == "numpy":
        return False
    if want != "numba":
        try:
            lo = int(os.environ.get("MBDE_PF_UPDATE_MIN", UPDATE_MIN))
        except ValueError:
            lo = UPDATE_MIN
        if N < lo:
            return False
    return kernels() is not None


def _run(fn, N: int, threads: int, args) -> None:
    """fn(*args, start, stop) over [0, N) in ``threads`` contiguous ranges (the calling thread
    runs the first, the pool ``pfupd`` the others; every particle's result is computed from its
    own inputs alone, so the ranges do not change it)."""
    parts = 1 if N < SERIAL_MAX else max(1, min(int(threads), N))
    bounds = [N * i // parts for i in range(parts + 1)]
    pending = [thread_pools.pool("pfupd", parts - 1).submit(fn, *args, bounds[i], bounds[i + 1]) for i in range(1, parts)]
    fn(*args, bounds[0], bounds[1])
    for f in pending:
        f.result()


def adapted_noise(sigma_a: float, yw, Gw, rng, threads: int = 1):
    """:func:`mbde_core.estimators.particle.proposal.adapted_noise` in one pass per particle
    (the same random numbers: eps drawn here as there; equal to rounding)."""
    K = kernels()
    N, _, g = Gw.shape
    eps = rng.standard_normal(N)[:, None] if g == 1 else rng.standard_normal((N, g))
    v, ll = np.empty((N, g)), np.empty(N)
    _run(K.adapted_range, N, threads, (float(sigma_a) ** 2, np.ascontiguousarray(yw, dtype=float),
                                       np.ascontiguousarray(Gw, dtype=float), eps, v, ll))
    return v, ll


def systematic(cdf, u: float, n: int, threads: int = 1):
    """(n,) ancestors of the comb (k + u) / n in ``cdf`` (as np.searchsorted(side='right'),
    capped at len(cdf) - 1: :func:`mbde_core.estimators.particle.resampling.systematic`)."""
    idx = np.empty(int(n), dtype=np.int64)
    _run(kernels().comb_range, int(n), threads, (np.ascontiguousarray(cdf, dtype=float), float(u), int(n), idx))
    return idx


def gather(a, idx, threads: int = 1):
    """a[idx] for a (N, r) float array; stored batch-last (a.T C-contiguous, as the propagation
    leaves its results) it is gathered as such and returned so (the next step's
    batch-last input is then free); otherwise numpy's a[idx]."""
    if a.ndim != 2 or a.dtype != np.float64 or not a.T.flags.c_contiguous:
        return a[idx]
    out = np.empty((a.shape[1], idx.size))
    _run(kernels().gather_range, idx.size, threads, (a.T, np.ascontiguousarray(idx, dtype=np.int64), out))
    return out.T
