"""The standard normals of the adapted proposal drawn ahead, on a pool thread, while the
particles are propagated -- the same numbers, from the same stream, as the draw they replace.

At 1e5 particles the draw of the proposal's noise eps (N, g) takes ~1 ms on one thread
(~9.5 ns a normal, AMD EPYC Zen 4), in the serial part of the update (numpy's generator is
sequential: the draw cannot be split over threads without changing the stream). A filter
owns one :class:`Ahead`: :meth:`Ahead.prefetch`, called before the propagation, draws the
next n normals from a *copy* of the filter's generator on the pool ``pfrng`` (numpy releases
the GIL while it fills an array) and notes the state the generator had; :meth:`Ahead.take`
(the update's draw) uses them only if the generator is still in that state -- nothing drew
from it since -- and then moves it to the copy's state after the draw, exactly as if it had
drawn them itself; otherwise it waits for the copy (it must not outlive its generator),
drops it and draws as before. So the stream, and every result, is the same with or without
the prefetch, whatever happens between the two calls (a failed propagation's replacements,
input-state draws, a re-initialisation).

A draw shorter than :data:`MIN_NORMALS` is not drawn ahead: the hand-off to the pool thread
(~120 us when it sleeps, :mod:`mbde_core.engine.thread_pools`) would cost more than the
draw, and the pool thread would compete with the propagation's own threads for the cores.
A forked child (the benches and replay fork worker processes) forgets a pending draw: its
pool thread is not in the child (the process id is noted at the prefetch).
"""
from __future__ import annotations

import copy
import os

import numpy as np

from mbde_core.engine import thread_pools

MIN_NORMALS = 32768  # draws from which a prefetch pays (2 x the hand-off's 150 us at ~9.5 ns a normal)


def _draw(clone, n: int):
    out = clone.standard_normal(n)
    return out, clone.bit_generator.state


class Ahead:
    """The next draw of standard normals of one generator, drawn ahead on a pool thread
    (see the module docstring). One per filter; ``take`` without a matching ``prefetch``
    draws from the generator itself."""

    def __init__(self):
        self._clone = None  # a copy of the generator (made once; later only its state is set)
        self._rng = None    # the generator the pending draw is for
        self._state = None  # its state at the prefetch
        self._n = 0
        self._fut = None    # the pending draw: (normals, the copy's state after them)
        self._pid = None

    def __getstate__(self):
        """A copy (pickle, deepcopy) starts without a pending draw (a future does not copy)."""
        self._settle()
        return {}

    def __setstate__(self, state):
        self.__init__()

    def _settle(self):
        """Wait for a pending draw (the copy is then free again) and forget it."""
        fut, self._fut = self._fut, None
        if fut is not None and self._pid == os.getpid():
            fut.result()
        elif fut is not None:
            self._clone = None  # a forked child: the draw was the parent's, the copy may be mid-draw

    def prefetch(self, rng: np.random.Generator, n: int) -> None:
        """Start drawing the next ``n`` standard normals of ``rng`` on the pool, if ``n`` >=
        MIN_NORMALS (a prefetch not taken is dropped by the next one)."""
        self._settle()
        if int(n) < MIN_NORMALS:
            return
        if self._clone is None or self._rng is not rng:
            self._clone = copy.deepcopy(rng)  # 0.15 ms, once per generator
        self._rng, self._n, self._pid = rng, int(n), os.getpid()
        self._state = rng.bit_generator.state
        self._clone.bit_generator.state = self._state
        self._fut = thread_pools.pool("pfrng", 1).submit(_draw, self._clone, self._n)

    def take(self, rng: np.random.Generator, N: int, g: int) -> np.ndarray:
        """(N, g) standard normals: ``rng.standard_normal(N)[:, None]`` (g = 1) or
        ``rng.standard_normal((N, g))``, the prefetched ones when they are exactly those."""
        fut = self._fut
        if fut is not None and self._pid == os.getpid():
            out, after = fut.result()
            self._fut = None  # taken or dropped; the copy stays for the next prefetch
            if self._rng is rng and self._n == N * g and rng.bit_generator.state == self._state:
                rng.bit_generator.state = after
                return out.reshape(N, g)
        else:
            self._settle()
        return rng.standard_normal(N)[:, None] if g == 1 else rng.standard_normal((N, g))


def take(ahead: Ahead | None, rng: np.random.Generator, N: int, g: int) -> np.ndarray:
    """``ahead.take(rng, N, g)``, or the plain draw without an :class:`Ahead`."""
    if ahead is not None:
        return ahead.take(rng, N, g)
    return rng.standard_normal(N)[:, None] if g == 1 else rng.standard_normal((N, g))
