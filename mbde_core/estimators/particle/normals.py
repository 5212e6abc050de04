"""The standard normals of the adapted proposal drawn ahead, on a pool thread, while the
particles are propagated -- the same numbers, from the same stream, as the draw they replace.

At 1e5 particles the draw of the proposal's noise eps (N, g) takes ~1 ms on one thread, in
the serial part of the update (numpy's generator is sequential: the draw cannot be split
over threads without changing the stream). :func:`prefetch`, called before the
propagation, draws the next N g normals from a *copy* of the filter's generator on the
pool ``pfrng`` (numpy releases the GIL while it fills an array), and notes the state the
generator had. :func:`take` (the update's draw) uses them only if the filter's generator is
still in that state -- nothing drew from it since -- and then moves it to the copy's state
after the draw, exactly as if it had drawn them itself; otherwise it waits for the copy (it
must not outlive its generator), drops it and draws as before. So the stream, and every
result, is the same with or without the prefetch, whatever happens between the two calls
(a failed propagation's replacements, input-state draws, a re-initialisation). A forked
child forgets the pending draws (their pool thread is not in it).
"""
from __future__ import annotations

import copy
import os

import numpy as np

from mbde_core.engine import thread_pools

_PENDING: dict = {}  # id(generator) -> [generator, its copy, state at the prefetch, size, future or None]
KEEP = 8  # generators remembered (the oldest is forgotten; a forgotten prefetch only costs its draw)


def _draw(clone, n: int):
    out = clone.standard_normal(n)
    return out, clone.bit_generator.state


def prefetch(rng: np.random.Generator, n: int) -> None:
    """Start drawing the next ``n`` standard normals of ``rng`` on the pool (see the module
    docstring); a prefetch not taken is dropped by the next one."""
    entry = _PENDING.pop(id(rng), None)
    if entry is not None and entry[0] is rng:
        if entry[4] is not None:
            entry[4].result()  # the copy is free again
        clone = entry[1]
    else:
        clone = copy.deepcopy(rng)  # once per generator (0.15 ms); later only its state is set
    state = rng.bit_generator.state
    clone.bit_generator.state = state
    fut = thread_pools.pool("pfrng", 1).submit(_draw, clone, int(n))
    while len(_PENDING) >= KEEP:
        old = _PENDING.pop(next(iter(_PENDING)))[4]
        if old is not None:
            old.result()
    _PENDING[id(rng)] = [rng, clone, state, int(n), fut]


def take(rng: np.random.Generator, N: int, g: int) -> np.ndarray:
    """(N, g) standard normals: ``rng.standard_normal(N)[:, None]`` (g = 1) or
    ``rng.standard_normal((N, g))``, the prefetched ones when they are exactly those."""
    entry = _PENDING.get(id(rng))
    if entry is not None and entry[4] is not None:
        gen, _, state, n, fut = entry
        out, after = fut.result()
        entry[4] = None  # taken or dropped; the copy stays for the next prefetch
        if gen is rng and n == N * g and rng.bit_generator.state == state:
            rng.bit_generator.state = after
            return out.reshape(N, g)
    return rng.standard_normal(N)[:, None] if g == 1 else rng.standard_normal((N, g))


if hasattr(os, "register_at_fork"):  # a forked child has none of the pool's threads (thread_pools)
    os.register_at_fork(after_in_child=_PENDING.clear)
