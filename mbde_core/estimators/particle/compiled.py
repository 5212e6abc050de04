"""Compiled kernels of the particle filter's serial numpy passes: the weighted moments of
``estimate``, the adapted proposal of the update, systematic resampling and the gather of
the resampled set (issue 43 item 4).

Each kernel is ``nogil`` and runs on contiguous ranges of particles (or fixed blocks of
them) on the thread pool ``pfupd`` (:mod:`mbde_core.engine.thread_pools`), the calling
thread taking the first range: no numba threading layer is involved (its ``workqueue``
naps cost more than the work below ~65536 particles, :mod:`mbde_core.engine.numba_kernels`).

- :func:`moments`: the weighted means of eq. 19 (the circular mean for angles) and the
  covariance of [z, zd] in two fused passes. Determinism: the sums are split into a fixed
  number of blocks (:data:`compiled_kernels.BLOCKS`, independent of the thread count), each
  block summed sequentially and the block sums added in order, so a result depends only on
  the inputs (the same for 1 or 2 threads, run to run); not bit-identical to numpy's
  pairwise/einsum sums (relative 1e-12 on sums of positive terms,
  test/test_pf_numba_reductions.py).
- :func:`adapted_noise`: :func:`mbde_core.estimators.particle.proposal.adapted_noise` in
  one pass per particle, with the same random draws (equal to rounding).
- :func:`systematic`: the comb of systematic resampling walked against the weights' CDF (the
  indices of numpy's searchsorted, exactly); :func:`gather`: the resampled arrays copied
  batch-last, so that the next propagation takes them as they are.

The normalisation of the log-weights stays in numpy: numba's scalar exp is slower than
numpy's vectorised one (1.7 ms against 0.7 ms at 1e5 on one thread). No random numbers are
drawn in a kernel (the callers draw them as their numpy code does).

Selection: :func:`enabled` (moments) and :func:`update_enabled` (the others) -- numba
importable (:func:`mbde_core.engine.numba_kernels.numba`), ``MBDE_PF_BACKEND`` ``numba`` (any
N) or ``auto`` and N >= ``MBDE_PF_MOMENTS_MIN`` / ``MBDE_PF_UPDATE_MIN`` (default 4096, the
propagation's threshold) or the filter's propagation already compiled (:func:`for_set`: any N); otherwise the numpy code of the callers runs unchanged, the
reference the kernels are tested against (test/test_pf_update_kernels.py). The kernels are
compiled once per machine (``cache=True``, a few seconds).
"""
from __future__ import annotations

import os

import numpy as np

from mbde_core.engine import numba_kernels, thread_pools
from mbde_core.engine.numba_cache import SERIAL_MAX
from mbde_core.estimators.particle import normals

_K = None  # the compiled kernels (namespace), False when numba is missing
_G = None  # the gate's kernel module (gate_kernels), False when numba is missing
MOMENTS_MIN = 4096  # particles from which the moments run on numba with ``auto`` (see above)
UPDATE_MIN = 4096  # particles from which the update kernels run with ``auto`` (the propagation's AUTO_MIN)


def min_n() -> int:
    try:
        return int(os.environ.get("MBDE_PF_MOMENTS_MIN", MOMENTS_MIN))
    except ValueError:
        return MOMENTS_MIN


def enabled(N: int, stepped: bool = False) -> bool:
    """Whether the numba reductions run for N particles (see the module docstring);
    stepped: the set's last propagation ran compiled (then any N)."""
    want = numba_kernels.requested()
    if want == "numpy" or (want != "numba" and N < min_n() and not stepped):
        return False
    return kernels() is not None


def stepped(pf) -> bool:
    """Whether the particle filter ``pf``'s last propagation ran on the compiled backend:
    numba is loaded and the mechanism's kernels compiled, so the update's kernels run at
    any N (at the default 300-800 particles one kernel call replaces 5-30 numpy calls of
    a few microseconds each: 6-12 % of a PF step on the shipped scenarios)."""
    prop = getattr(pf, "propagator", None)
    return prop is not None and prop.backend == "numba"


def for_set(pf) -> bool:
    """:func:`update_enabled` for the particle filter ``pf``'s set (its N, :func:`stepped`)."""
    return update_enabled(pf.N, stepped(pf))


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


def moments(w, q, qd, qdd, v, sin_z, cos_z, iz, angular, threads: int = 1):
    """((zm, zdm, zddm) (g,) each, P (2g, 2g) without the kernel term) of a particle set;
    sin_z, cos_z (N, g): sin and cos of z (any values at non-angular columns). Two passes
    over BLOCKS fixed blocks on the thread pool, their block sums added in block order."""
    K = kernels()
    N, g = q.shape[0], len(iz)
    B = max(1, min(K.BLOCKS, N))
    mean, cov = np.empty((3, g)), np.empty((2 * g, 2 * g))
    w = np.ascontiguousarray(w, dtype=float)
    iz, angular = np.ascontiguousarray(iz, dtype=np.int64), np.ascontiguousarray(angular, dtype=np.bool_)
    acc = np.empty((B, 5, g))
    _run(K.moment_sums, B, threads, (w, q, qd, qdd, np.ascontiguousarray(v, dtype=float), sin_z, cos_z, iz, angular, acc), N)
    K.moment_means(acc, angular, mean)
    cacc = np.zeros((B, 2 * g, 2 * g))
    _run(K.cov_sums, B, threads, (w, q, qd, iz, angular, mean, cacc), N)
    K.cov_total(cacc, cov)
    return (mean[0].copy(), mean[1].copy(), mean[2].copy()), cov


# -- the update and the resampling: nogil kernels on contiguous ranges on the thread pool ----

def update_enabled(N: int, stepped: bool = False) -> bool:
    """Whether the update and resampling kernels (:func:`adapted_noise`, :func:`systematic`,
    :func:`gather`) run for N particles: numba importable, ``MBDE_PF_BACKEND`` ``numba`` (any
    N) or ``auto`` and N >= ``MBDE_PF_UPDATE_MIN`` (default :data:`UPDATE_MIN`) or ``stepped``
    (the set's propagation runs compiled: :func:`stepped`); else the numpy code of the
    callers runs (the reference: the kernels are tested against it)."""
    want = numba_kernels.requested()
    if want == "numpy":
        return False
    if want != "numba" and not stepped:
        try:
            lo = int(os.environ.get("MBDE_PF_UPDATE_MIN", UPDATE_MIN))
        except ValueError:
            lo = UPDATE_MIN
        if N < lo:
            return False
    return kernels() is not None


# CPU per particle of each kernel on one thread (ns; four-bar, 1e4 and 1e5 particles, AMD EPYC
# Zen 4): a kernel is split over the threads only when its work exceeds the break-even of a
# hand-off (:func:`mbde_core.engine.thread_pools.parts`), else it runs on the calling thread.
NS = {"adapted_range": 15.0, "adapted_one_scalar": 15.0, "adapted_one": 30.0, "impulse_range": 8.0,
      "gyro_range": 8.0, "moment_sums": 3.0, "cov_sums": 8.0, "branch_sums": 8.0, "gather_range": 5.0,
      "comb_range": 14.0}


def _run(fn, N: int, threads: int, args, particles: int | None = None) -> None:
    """fn(*args, start, stop) over [0, N) (particles, or blocks of ``particles``) in ``threads``
    contiguous ranges (the calling thread runs the first, the pool ``pfupd`` the others; every
    particle's (block's) result is computed from its own inputs alone, so the ranges do not
    change it); one range (the calling thread) below the break-even of a hand-off for the
    kernel's cost per particle (:data:`NS`)."""
    work = N if particles is None else particles
    n = thread_pools.parts(work, threads, NS.get(getattr(fn, "__name__", ""), 10.0), SERIAL_MAX)
    parts = 1 if n == 1 else max(1, min(n, N))
    bounds = [N * i // parts for i in range(parts + 1)]
    pending = [thread_pools.pool("pfupd", parts - 1).submit(fn, *args, bounds[i], bounds[i + 1]) for i in range(1, parts)]
    fn(*args, bounds[0], bounds[1])
    for f in pending:
        f.result()


def adapted_noise(sigma_a: float, yw, Gw, rng, threads: int = 1, ahead=None):
    """:func:`mbde_core.estimators.particle.proposal.adapted_noise` in one pass per particle
    (the same random numbers: eps drawn here as there, maybe ahead by ``ahead``, a
    :class:`.normals.Ahead`; equal to rounding)."""
    K = kernels()
    N, _, g = Gw.shape
    eps = normals.take(ahead, rng, N, g)  # as rng.standard_normal (:mod:`.normals`)
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


def branch_covariances(w, q, qd, iz, label, K: int, angular, floor, threads: int = 1):
    """:func:`mbde_core.estimators.particle.resampling.branch_covariances` of the branches'
    deviations from their circular means (as resample_set computes them), in three block
    passes on the thread pool (means, centred means, outer products; block sums added in
    order: the same for any thread count; equal to the numpy code to rounding)."""
    Kc = kernels()
    N, g = q.shape[0], len(iz)
    B = max(1, min(Kc.BLOCKS, N))
    K = int(K)
    w = np.ascontiguousarray(w, dtype=float)
    iz, angular = np.ascontiguousarray(iz, dtype=np.int64), np.ascontiguousarray(angular, dtype=np.bool_)
    label = np.ascontiguousarray(label, dtype=np.int64)
    za = q[:, iz[angular]]
    sin_z, cos_z = np.zeros((N, g)), np.zeros((N, g))
    sin_z[:, angular], cos_z[:, angular] = np.sin(za), np.cos(za)
    d = 2 * g
    mz, mx = np.zeros((K, g)), np.zeros((K, d))
    sums = []
    for stage, width in ((0, 3 * g + 1), (1, d), (2, d * d)):
        acc = np.empty((B, K, width))
        _run(Kc.branch_sums, B, threads, (w, q, qd, iz, label, angular, sin_z, cos_z, mz, mx, stage, acc), N)
        out = np.empty((K, width))
        Kc.block_total(acc, out)
        if stage == 0:
            tot = out
            W = np.maximum(out[:, 0], 1e-300)
            for c in range(g):
                mz[:, c] = (np.arctan2(out[:, 1 + g + c], out[:, 1 + 2 * g + c]) if angular[c]
                            else out[:, 1 + c] / W)
        elif stage == 1:
            mx[:] = out / W[:, None]
        sums.append(out)
    res = np.broadcast_to(floor, (K, d, d)).copy()
    C = sums[2].reshape(K, d, d)
    for k in range(K):
        if tot[k, 0] > 0:
            Ck = np.triu(C[k]) / tot[k, 0]
            Ck = Ck + np.triu(Ck, 1).T
            res[k] += Ck
    return res


def adapted_reading(sigma_a: float, r, W, G, w, rng, lim: float, threads: int = 1, ahead=None):
    """One reading's adapted proposal in one compiled pass (weights.adapted with a single
    reading: the whitening, the bad and wild tests, proposal.adapted_noise and the noise
    term s2 sum_i w_i G_i G_i^T): (v (N, g), ll (N,), bad (N,), wild (N,), extra (D, D)),
    the same random draws as the numpy code (maybe drawn ahead by ``ahead``, a
    :class:`.normals.Ahead`), equal to it to rounding."""
    Kc = kernels()
    N, D, g = G.shape
    eps = normals.take(ahead, rng, N, g)  # as rng.standard_normal (:mod:`.normals`)
    B = max(1, min(Kc.BLOCKS, N))
    v, ll = np.empty((N, g)), np.empty(N)
    bad, wild = np.empty(N, dtype=np.bool_), np.empty(N, dtype=np.bool_)
    xacc = np.empty((B, D, D))
    s2 = float(sigma_a) ** 2
    f = np.ascontiguousarray
    fn = Kc.adapted_one_scalar if D == 1 and g == 1 else Kc.adapted_one
    _run(fn, B, threads, (s2, f(r, dtype=float), f(W, dtype=float), f(G, dtype=float), f(w, dtype=float),
                                      eps, float(lim), v, ll, bad, wild, xacc), N)
    extra = np.empty((1, D * D))
    Kc.block_total(xacc.reshape(B, 1, D * D), extra)
    return v, ll, bad, wild, s2 * extra.reshape(D, D)


def impulse(qd, Rc, dzd, threads: int = 1):
    """qd + R dzd (N, n) (:func:`mbde_core.estimators.particle.proposal.impulse_velocities`)
    in one compiled pass on ``threads`` ranges, in qd's layout (the same sums in the same
    order: equal to the numpy code)."""
    out = np.empty_like(qd)
    _run(kernels().impulse_range, qd.shape[0], threads, (qd, Rc, np.ascontiguousarray(dzd, dtype=float), out))
    return out


def gyroscope(sensor, q, qd, Rc, dt: float, threads: int = 1):
    """(h (N, 1), G (N, 1, g) or None when Rc is None) of a gyroscope in one compiled pass on
    ``threads`` ranges: its prediction and noise Jacobian (:mod:`.prediction`), the formulas
    of the numpy code (equal to it to rounding)."""
    (a, ca, b, cb, c_, cc, d, cd), (e, ce, f, cf, g_, cg, k, ck), _ = sensor._float_layout()
    lq = np.array([a, b, c_, d], dtype=np.int64)
    cq = np.array([ca, cb, cc, cd], dtype=float)
    lv = np.array([e, f, g_, k], dtype=np.int64)
    cv = np.array([ce, cf, cg, ck], dtype=float)
    N = q.shape[0]
    pred = np.empty((N, 1))
    with_G = Rc is not None
    G = np.empty((N, 1, Rc.shape[0])) if with_G else np.empty((N, 1, 1))
    Rk = Rc if with_G else np.empty((1, 1, 1))
    _run(kernels().gyro_range, N, threads, (q, qd, Rk, float(dt), lq, cq, lv, cv, with_G, pred, G))
    return pred, (G if with_G else None)


def gate_d2(ll, logw, w, p, w0: float, angular: bool, cand) -> float:
    """:func:`mbde_core.estimators.particle.likelihood.predictive_d2` of a scalar reading
    (its scalar branch, no ``limit``) in one compiled pass per reference
    (:mod:`.gate_kernels`; equal to the numpy code to rounding), or None when numba is
    not importable. p: (N,) predictions; w0: the whitening; cand: the candidates."""
    global _G
    if _G is None:
        # lazy: imports numba and compiles on first use (cached per machine); only when chosen
        from mbde_core.estimators.particle import gate_kernels

        _G = gate_kernels if numba_kernels.numba() is not None else False
    if not _G:
        return None
    f = np.ascontiguousarray
    return float(_G.gate_d2(f(ll, dtype=float), f(logw, dtype=float), f(w, dtype=float), f(p, dtype=float),
                            float(w0), bool(angular), f(cand, dtype=np.int64)))
