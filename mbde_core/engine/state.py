"""The dynamic state every integrator takes and returns (:mod:`mbde_core.engine.integrators`)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class MBState:
    """Dynamic state: q, qd, qdd (n,) or (N, n); ok: bool or (N,) bool (assembly succeeded).

    aux: what a batched fast step knows at its result q (:class:`step_backends.Context`), or
    None; passed back with q unchanged, the next step reuses it. Drop it (None) when
    editing q; gather it with the states by ``aux.take(idx)``.
    """

    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray | None = None
    ok: np.ndarray | bool = True
    aux: object = None

    def batch(self):
        """(q, qd, qdd, single) with arrays forced to (N, n)."""
        single = np.asarray(self.q).ndim == 1
        f = (lambda a: None if a is None else np.atleast_2d(np.asarray(a, dtype=float)))
        return f(self.q), f(self.qd), f(self.qdd), single

    @staticmethod
    def make(q, qd, qdd, ok, single) -> "MBState":
        if single:
            return MBState(q[0], qd[0], None if qdd is None else qdd[0], bool(np.all(ok)))
        return MBState(q, qd, qdd, ok)
