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


ROWS_MIN = 4096  # particle sets from which :func:`rows` splits the work (below: the calling thread)


def rows(fn, N: int, threads: int, name: str = "pfrows", min_rows: int = ROWS_MIN) -> None:
    """fn(lo, hi) over the rows [0, N) of a particle set in ``threads`` contiguous ranges
    (boundaries N i / threads), the calling thread running the first and the pool ``name``
    the others; one range below ``min_rows`` rows. For numpy code per particle (numpy
    releases the GIL in its loops on float arrays): each range must write only its own
    rows of preallocated outputs and compute a row from that row's inputs alone, so the
    results do not depend on the thread count. An exception of a range is raised here
    after every range has finished."""
    N = int(N)
    parts = 1 if N < min_rows else max(1, min(int(threads), N))
    if parts == 1:
        fn(0, N)
        return
    bounds = [N * i // parts for i in range(parts + 1)]
    pending = [pool(name, parts - 1).submit(fn, bounds[i], bounds[i + 1]) for i in range(1, parts)]
    try:
        fn(bounds[0], bounds[1])
    finally:
        errors = [f.exception() for f in pending]
    for e in errors:
        if e is not None:
            raise e
