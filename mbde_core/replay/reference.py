"""The batch smoother's trajectory as a replay's reference, kept in a file, not in memory.

``mbde replay --reference smoother`` compares every estimator with the smoothed
trajectory of the same readings. A long bag's trajectory (an hour: 720 000 steps) is not
held in memory nor copied into every estimator's process: :class:`ReferenceWriter`
appends the smoother's steps, window by window, to a file of fixed-size rows
``[t, z (g), zd (g), zdd (g), cov (2g x 2g, NaN if none)]`` (float64, on the smoother's
uniform grid t_i = t_0 + i dt), and :class:`ReferenceTrajectory` (small and picklable: the
path and the grid) reads back only the rows around the stamps it is asked for.
"""
from __future__ import annotations

import os

import numpy as np

from mbde_core.estimators.assess.metrics import truth_at


class ReferenceWriter:
    """Append smoothed steps (t (K,), z, zd, zdd (K, g), cov (K, 2g, 2g) or None) in time order."""

    def __init__(self, path: str, g: int):
        self.path, self.g = os.fspath(path), int(g)
        self.width = 1 + 3 * self.g + 4 * self.g * self.g
        self.fh = open(self.path, "wb")
        self.count = 0
        self.t_first = self.t_last = None
        self.has_cov = True

    def add(self, t, z, zd, zdd, cov) -> None:
        K = len(t)
        if K == 0:
            return
        g = self.g
        rows = np.empty((K, self.width))
        rows[:, 0] = t
        rows[:, 1:1 + 3 * g] = np.hstack([z, zd, zdd])
        if cov is None:
            self.has_cov = False
            rows[:, 1 + 3 * g:] = np.nan
        else:
            rows[:, 1 + 3 * g:] = np.asarray(cov).reshape(K, -1)
        self.fh.write(rows.tobytes())
        if self.t_first is None:
            self.t_first = float(t[0])
        self.t_last = float(t[-1])
        self.count += K

    def close(self, angular) -> "ReferenceTrajectory":
        self.fh.close()
        dt = (self.t_last - self.t_first) / (self.count - 1) if self.count > 1 else 1.0
        return ReferenceTrajectory(self.path, self.g, self.count, self.t_first, dt, self.has_cov, angular)


class ReferenceTrajectory:
    """The smoothed trajectory in a :class:`ReferenceWriter` file; :meth:`at` gives it at
    estimate stamps (linear interpolation as :func:`~mbde_core.estimators.assess.metrics.truth_at`,
    exact on the smoother's grid, which is the filters' when the steps agree), reading
    only the rows around each group of stamps."""

    GAP = 1000  # rows: stamps farther apart than this are read as separate groups

    def __init__(self, path: str, g: int, count: int, t0: float, dt: float, has_cov: bool, angular):
        self.path, self.g, self.count = path, int(g), int(count)
        self.t0, self.dt, self.has_cov = float(t0), float(dt), bool(has_cov)
        self.angular = np.asarray(angular, bool)
        self.width = 1 + 3 * self.g + 4 * self.g * self.g

    def _rows(self, lo: int, hi: int) -> np.ndarray:
        """Rows lo..hi-1 of the file."""
        with open(self.path, "rb") as fh:
            fh.seek(lo * self.width * 8)
            return np.fromfile(fh, dtype=np.float64, count=(hi - lo) * self.width).reshape(hi - lo, self.width)

    def at(self, stamps) -> dict:
        """{z, zd, zdd (K, g), cov (K, 2g, 2g) or None, effort None} at ``stamps`` (K,)."""
        stamps = np.asarray(stamps, dtype=float)
        g, K = self.g, len(stamps)
        out = {"z": np.empty((K, g)), "zd": np.empty((K, g)), "zdd": np.empty((K, g)),
               "cov": np.empty((K, 2 * g, 2 * g)) if self.has_cov else None, "effort": None}
        if K == 0 or self.count == 0:
            return out
        i = np.clip(np.floor((stamps - self.t0) / self.dt).astype(np.int64), 0, self.count - 1)
        order = np.argsort(i, kind="stable")
        cuts = np.flatnonzero(np.diff(i[order]) > self.GAP) + 1
        for sel in np.split(order, cuts):
            lo = max(int(i[sel].min()) - 1, 0)
            hi = min(int(i[sel].max()) + 3, self.count)
            rows = self._rows(lo, hi)
            t, s = rows[:, 0], stamps[sel]
            out["z"][sel] = truth_at(s, t, rows[:, 1:1 + g], self.angular)
            out["zd"][sel] = truth_at(s, t, rows[:, 1 + g:1 + 2 * g])
            out["zdd"][sel] = truth_at(s, t, rows[:, 1 + 2 * g:1 + 3 * g])
            if self.has_cov:
                out["cov"][sel] = truth_at(s, t, rows[:, 1 + 3 * g:]).reshape(len(sel), 2 * g, 2 * g)
        return out
