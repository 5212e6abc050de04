"""The value of a coordinate map and its derivatives at a batch of minimal coordinates."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class MapJet:
    """q = g_n(z) and its derivatives for a batch of N configurations.

    q: (N, n); J = dq/dz: (N, n, g) (paper 004's dg_n/dq_m, the R matrix of the exact map);
    H2 = d2q/dz2: (N, n, g, g); H3 = d3q/dz3: (N, n, g, g, g) (None when not requested);
    ok: (N,) bool, False where the configuration could not be assembled.
    All derivative tensors are symmetric in their z indices.
    """

    q: np.ndarray
    J: np.ndarray
    H2: np.ndarray | None
    H3: np.ndarray | None
    ok: np.ndarray

    def __len__(self) -> int:
        return self.q.shape[0]

    def single(self, k: int = 0) -> "MapJet":
        """The k-th configuration as a batch of one."""
        sl = slice(k, k + 1)
        return MapJet(self.q[sl], self.J[sl], None if self.H2 is None else self.H2[sl],
                      None if self.H3 is None else self.H3[sl], self.ok[sl])

    def velocity(self, zd: np.ndarray) -> np.ndarray:
        """qd = J zd: (N, n) for zd (N, g) (eq. 26)."""
        return np.einsum("nij,nj->ni", self.J, np.asarray(zd, dtype=float).reshape(len(self), -1))

    def acceleration(self, zd: np.ndarray, zdd: np.ndarray) -> np.ndarray:
        """qdd = J zdd + H2[zd, zd]: (N, n) (eq. 27)."""
        zd = np.asarray(zd, dtype=float).reshape(len(self), -1)
        zdd = np.asarray(zdd, dtype=float).reshape(len(self), -1)
        return np.einsum("nij,nj->ni", self.J, zdd) + np.einsum("nijk,nj,nk->ni", self.H2, zd, zd)
