"""Process-wide thread pools for the particle propagation, safe across ``fork``.

The PF propagates large particle sets on a few threads (:mod:`mbde_core.engine.
numba_kernels`: ranges of a set through a ``nogil`` compiled loop; :mod:`mbde_core.
estimators.pf_parallel`: numpy chunks). A pool is made once per (name, size) and kept.
The benches and ``mbde replay`` fork worker processes, possibly after the parent ran a
filter: a forked child has none of its parent's threads, yet a copied
``ThreadPoolExecutor`` believes its workers are idle, takes the child's tasks and never
runs them (the child's step hangs; test/test_pf_numba.py). So the pools, and the lock
that guards them, are forgotten in a forked child (``os.register_at_fork``) and made
again there on first use.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

_POOLS: dict[tuple[str, int], ThreadPoolExecutor] = {}
_LOCK = threading.Lock()


def pool(name: str, workers: int) -> ThreadPoolExecutor:
    """The process's pool ``name`` of ``workers`` threads (made at the first call)."""
    key = (name, int(workers))
    with _LOCK:
        p = _POOLS.get(key)
        if p is None:
            p = _POOLS[key] = ThreadPoolExecutor(max_workers=int(workers), thread_name_prefix=f"mbde-{name}")
        return p


def _after_fork_in_child() -> None:
    global _LOCK
    _POOLS.clear()
    _LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


ROWS_MIN = 4096  # particle sets from which :func:`rows` may split the work (below: the calling thread)

# Break-even of a split. A hand-off to a pool thread that sleeps (submit, wake-up, result)
# costs ~120 us of wall on the 2-vCPU KVM machine (AMD EPYC Zen 4) when the worker slept for
# 2 ms, ~30 us back to back (measured: ``ThreadPoolExecutor.submit(f).result()``, median of
# 300); the PF's passes come a few hundred microseconds apart, so each hand-off pays the wake-up.
# Splitting work of T seconds on one thread into two ranges saves T/2 and costs a hand-off:
# a pass is split only when its work on one thread, rows x ns_per_row, is at least
# SPLIT_MIN_NS. Callers state their measured cost per row (one thread, process CPU);
# the cheap per-particle kernels (5-15 ns a particle) then stay on the calling thread below
# ~2-6e4 particles, the RK4 step (~100 ns) from ~3000.
HANDOFF_NS = 150_000
SPLIT_MIN_NS = 2 * HANDOFF_NS


def parts(N: int, threads: int, ns_per_row: float | None = None, min_rows: int = ROWS_MIN) -> int:
    """How many contiguous ranges to cut N rows of work into on ``threads`` threads: one
    below ``min_rows`` rows or, when the cost per row (ns, one thread) is given, below
    the break-even SPLIT_MIN_NS of a hand-off; else min(threads, N)."""
    N, threads = int(N), int(threads)
    if threads < 2 or N < min_rows or (ns_per_row is not None and N * float(ns_per_row) < SPLIT_MIN_NS):
        return 1
    return max(1, min(threads, N))


def rows(fn, N: int, threads: int, name: str = "pfrows", min_rows: int = ROWS_MIN, ns_per_row: float | None = None) -> None:
    """fn(lo, hi) over the rows [0, N) of a particle set in ``threads`` contiguous ranges
    (boundaries N i / threads), the calling thread running the first and the pool ``name``
    the others; one range below ``min_rows`` rows or below the break-even of a hand-off
    (:func:`parts`, with the pass's cost per row ``ns_per_row``). For numpy code per
    particle (numpy releases the GIL in its loops on float arrays): each range must write
    only its own rows of preallocated outputs and compute a row from that row's inputs
    alone, so the results do not depend on the thread count. An exception of a range is
    raised here after every range has finished."""
    N = int(N)
    n_parts = parts(N, threads, ns_per_row, min_rows)
    if n_parts == 1:
        fn(0, N)
        return
    bounds = [N * i // n_parts for i in range(n_parts + 1)]
    pending = [pool(name, n_parts - 1).submit(fn, bounds[i], bounds[i + 1]) for i in range(1, n_parts)]
    try:
        fn(bounds[0], bounds[1])
    finally:
        errors = [f.exception() for f in pending]
    for e in errors:
        if e is not None:
            raise e
