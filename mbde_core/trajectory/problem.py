"""The smoother's nonlinear least-squares problem (protocol of :mod:`.solver`).

Unknowns: X (N, 3g), the states x_i = [z_i, zd_i, zdd_i] of the grid (b = 3g, no global
parameters: P = 0). Residuals: the factors of :mod:`.factors` (prior, eom, integrator,
one RowBlock per sensor). The position problems of an evaluation start from the q of
the last *accepted* iterate (``accept``), so every step stays on its assembly branch;
a trial point whose position problem fails at some step gets an infinite cost (the
solver then shortens the step).
"""
from __future__ import annotations

import numpy as np

from mbde_core.trajectory.factors import Integrator, eom_rows, observation_rows, prior_rows
from mbde_core.trajectory.normal import RowBlock


class SmootherProblem:
    """model: :class:`~mbde_core.trajectory.model.MultibodyModel` (or any object with
    ``g``, ``angular``, ``evaluate(t, X, q_guess)``, ``observe`` and ``innovation``);
    readings: :class:`~mbde_core.trajectory.readings.Readings`; sigma_a (g,) [unit/s^2];
    prior_mean (m,) and prior_sqrt_info (m, m) of the first m entries of x_0 (m = 2g:
    [z_0, zd_0]); q_guess (N, n) or None; first_eom False: no eom factor at step 0.
    """

    P = 0

    def __init__(self, model, readings, sigma_a, prior_mean, prior_sqrt_info, scheme: str = "linear_acceleration",
                 relaxation: float = 1e-3, q_guess=None, first_eom: bool = True):
        self.model = model
        self.readings = readings
        self.g = g = model.g
        self.N = readings.N
        self.b = 3 * g
        self.t = readings.times
        self.sigma_a = np.broadcast_to(np.asarray(sigma_a, dtype=float), (g,)).copy()
        self.prior_mean = np.asarray(prior_mean, dtype=float)
        self.prior_sqrt_info = np.asarray(prior_sqrt_info, dtype=float)
        self.integrator = Integrator(g, readings.dt, scheme, self.sigma_a, relaxation)
        self.q_guess = None if q_guess is None else np.array(q_guess, dtype=float)
        self.first_eom = first_eom  # False: no eom factor at step 0 (held by the prior)
        self.ev = None  # the model at the last accepted iterate
        self._trial = None

    def evaluate(self, X: np.ndarray, p=None) -> list[RowBlock]:
        g = self.g
        ev = self.model.evaluate(self.t, X, self.q_guess)
        self._trial = ev
        if not np.all(ev.ok):
            bad = np.flatnonzero(~np.asarray(ev.ok))
            return [RowBlock("assembly", bad, np.full((bad.size, 1), np.inf), np.zeros((bad.size, 1, self.b)))]
        eom = eom_rows(X, g, ev.f, ev.F, self.sigma_a)
        if not self.first_eom:
            eom = RowBlock(eom.name, eom.idx[1:], eom.r[1:], eom.Ji[1:])
        rows = [prior_rows(X, g, self.prior_mean, self.prior_sqrt_info, self.model.angular), eom, self.integrator.rows(X)]
        rows += [observation_rows(self.model, ev, s) for s in self.readings.sensors if s.idx.size]
        return rows

    def accept(self, X, p=None) -> None:
        self.ev = self._trial
        if getattr(self.ev, "q", None) is not None:
            self.q_guess = self.ev.q

    @staticmethod
    def cost_breakdown(rows) -> dict:
        """Cost 1/2 |r|^2 and number of residuals per factor kind."""
        out = {}
        for rb in rows:
            c = out.setdefault(rb.name, {"cost": 0.0, "residuals": 0})
            c["cost"] += rb.cost
            c["residuals"] += int(rb.r.size)
        return out
