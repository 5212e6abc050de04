"""Time-dependent (rheonomic) driving constraints Phi(q, t) = 0: prescribed motions.

A driver prescribes a quantity as a function of time f(t) (YAML ``driving_constraints``):

- ``coordinate``: q_c - f(t) = 0 (e.g. a crane's cart position x_r(t));
- ``distance``: |P_j - P_i|^2 - f(t)^2 = 0 for the two points of a body, whose length
  becomes f (e.g. a crane's rope length r(t)).

Both are a static row Phi_s(q) (a linear coordinate row, a distance row with L = 0) minus
a function of time: Phi(q, t) = Phi_s(q) - c(t), with c = f (coordinate) or f^2
(distance), so Phi_q = Phi_s,q does not depend on t (and the generated kernels of the
static rows apply unchanged). The kinematic problems gain the driver terms (García de
Jalón & Bayo 1994, sec. 4.3)::

    position      Phi_s(q) = c(t)
    velocity      Phi_q qd = c'(t)                      ->  qd = R zd + s_v,   s_v[z] = 0
    acceleration  Phi_q qdd = -(Phi_q)' qd + c''(t)     ->  qdd = R zdd + R' zd + s_a

with Phi_q,d s_v[d] = c', Phi_q,d s_a[d] = c'' (the particular solutions; c' = f' or
2 f f', c'' = f'' or 2 (f'^2 + f f'')), and the R-matrix dynamics
R^T M R zdd = R^T (Q - M (R' zd + s_a)).

f' and f'' are the ``velocity`` and ``acceleration`` functions when the YAML gives them,
else 4th-order central differences of f with step ``FD_STEP`` (error ~1e-9 relative for
smooth f; tables are piecewise linear, so their derivatives jump at the table times).
"""
from __future__ import annotations

import numpy as np

FD_STEP = 1e-3  # [s]


def derivatives(f, t: float) -> tuple[float, float, float]:
    """(f, f', f'') at t by 4th-order central differences (step FD_STEP)."""
    d = FD_STEP
    fm2, fm1, f0, fp1, fp2 = (f(t + k * d) for k in (-2, -1, 0, 1, 2))
    d1 = (fm2 - 8.0 * fm1 + 8.0 * fp1 - fp2) / (12.0 * d)
    d2 = (-fm2 + 16.0 * fm1 - 30.0 * f0 + 16.0 * fp1 - fp2) / (12.0 * d * d)
    return f0, d1, d2


class DriverSet:
    """The drivers of one mechanism: kept-row indices ``rows`` (k,) and their functions.

    ``offset(t)``: c(t) (m,); ``rates(t)``: (c'(t), c''(t)) (m,) each; zero on the
    other rows. Values are cached for the last time asked (integrators ask repeatedly).
    """

    def __init__(self, rows, specs, m: int):
        self.rows = np.asarray(rows, dtype=np.intp)
        self.specs = tuple(specs)
        self.m = int(m)
        self._cache = (None, None)

    def __bool__(self) -> bool:
        return bool(self.rows.size)

    def _values(self, t: float):
        key, val = self._cache
        if key == t:
            return val
        c, cd, cdd = np.zeros(self.m), np.zeros(self.m), np.zeros(self.m)
        for r, s in zip(self.rows, self.specs):
            if s.velocity is None or s.acceleration is None:
                f, f1, f2 = derivatives(s.position, t)
            else:
                f = s.position(t)
            if s.velocity is not None:
                f1 = s.velocity(t)
            if s.acceleration is not None:
                f2 = s.acceleration(t)
            if s.kind == "coordinate":
                c[r], cd[r], cdd[r] = f, f1, f2
            else:
                c[r], cd[r], cdd[r] = f * f, 2.0 * f * f1, 2.0 * (f1 * f1 + f * f2)
        val = (c, cd, cdd)
        self._cache = (t, val)
        return val

    def offset(self, t: float) -> np.ndarray:
        return self._values(float(t))[0]

    def rates(self, t: float):
        _, cd, cdd = self._values(float(t))
        return cd, cdd

    def prescribed(self, t: float) -> dict[str, float]:
        """{driver name: f(t)} (the prescribed values, for reports)."""
        return {s.name: float(s.position(t)) for s in self.specs}
