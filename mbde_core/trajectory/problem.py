"""The smoother's nonlinear least-squares problem (protocol of :mod:`.solver`).

Unknowns: X (N, b), the states x_i = [z_i, zd_i, zdd_i, u_i] of the grid (b = 3g + m, m
input states of :mod:`.inputs`; no global parameters: P = 0). Residuals: the factors of
:mod:`.factors` (prior, eom, integrator, one RowBlock per sensor) and of the inputs
(random walk, prior, measured inputs). The position problems of an evaluation start from
the q of the last *accepted* iterate (``accept``), so every step stays on its assembly
branch; a trial point whose position problem fails at some step gets an infinite cost
(the solver then shortens the step).

Known inputs can also enter without states (``direct``: generalized forces E_d U_d of
given values at every step, e.g. a recorded control signal times a motor gain that
identification estimates): f gains G_d U_d, and the model's G (``ev.G``) keeps their
columns after the states'.
"""
from __future__ import annotations

import numpy as np

from mbde_core.trajectory import inputs as inp
from mbde_core.trajectory.factors import Integrator, eom_rows, observation_rows, prior_rows
from mbde_core.trajectory.normal import RowBlock


class SmootherProblem:
    """model: :class:`~mbde_core.trajectory.model.MultibodyModel` (or any object with
    ``g``, ``angular``, ``evaluate(t, X, q_guess, E, U)``, ``observe`` and ``innovation``);
    readings: :class:`~mbde_core.trajectory.readings.Readings`; sigma_a (g,) [unit/s^2];
    prior_mean (k,) and prior_sqrt_info (k, k) of the first k entries of x_0 (k = 2g:
    [z_0, zd_0]); q_guess (N, n) or None; first_eom False: no eom factor at step 0 (and no
    input prior: a window whose marginalised past holds both); inputs: InputChannels of
    the input states (None: none); input_mean (m,): the input prior's mean; direct: (E_d
    (n, k), U_d (N, k)) known generalized forces without states, or None.
    """

    P = 0

    def __init__(self, model, readings, sigma_a, prior_mean, prior_sqrt_info, scheme: str = "linear_acceleration",
                 relaxation: float = 1e-3, q_guess=None, first_eom: bool = True, inputs=None, input_mean=None,
                 direct=None):
        self.model = model
        self.readings = readings
        self.g = g = model.g
        self.N = readings.N
        self.inputs = inputs if inputs is not None else inp.no_inputs()
        self.m = self.inputs.m
        self.b = 3 * g + self.m
        self.t = readings.times
        self.sigma_a = np.broadcast_to(np.asarray(sigma_a, dtype=float), (g,)).copy()
        self.sigma_w = np.array(self.inputs.sigma_w, dtype=float)
        self.prior_mean = np.asarray(prior_mean, dtype=float)
        self.prior_sqrt_info = np.asarray(prior_sqrt_info, dtype=float)
        self.scheme, self.relaxation = scheme, relaxation
        self.discretization = None  # the scheme's error d (g,) in the integrator's sigmas (set by the noise estimation)
        self.sensor_scale: dict = {}  # sensor name -> (d,) multipliers of its channels' sigmas (estimated noise)
        self.integrator = Integrator(g, readings.dt, scheme, self.sigma_a, relaxation, self.b)
        self.q_guess = None if q_guess is None else np.array(q_guess, dtype=float)
        self.first_eom = first_eom  # False: no eom factor at step 0 (held by the prior)
        self.input_mean = np.zeros(self.m) if input_mean is None else np.asarray(input_mean, dtype=float)
        self.direct = direct
        n = model.mech.n if hasattr(model, "mech") else None
        E = self.inputs.matrix(n) if (self.m and n is not None) else np.zeros((n or 0, 0))
        self.E = np.hstack([E, direct[0]]) if direct is not None else E
        self.input_weights = {}  # known-input sensor -> (K,) weights of its readings
        for rows in readings.inputs:
            j = self.inputs.channel_of(rows.name)
            if j is not None:
                sensor = next(x for x in self.inputs.sensors[j] if x.name == rows.name)
                self.input_weights[rows.name] = inp.reading_weights(rows, readings.dt * sensor.rate)
        self.ev = None  # the model at the last accepted iterate
        self._trial = None

    def set_noise(self, sigma_a=None, sigma_w=None, discretization=None, sensor_scale=None) -> None:
        """New acceleration sigmas (g,) (the integrator's follow), input-walk sigmas (m,),
        the integration scheme's error d (g,) (:class:`~.factors.Integrator`) and the
        sensors' sigma multipliers {name: (d,)}."""
        if sensor_scale is not None:
            self.sensor_scale = {k: np.asarray(v, dtype=float).copy() for k, v in sensor_scale.items()}
        if discretization is not None:
            self.discretization = np.asarray(discretization, dtype=float)
        if sigma_a is not None or discretization is not None:
            if sigma_a is not None:
                self.sigma_a = np.broadcast_to(np.asarray(sigma_a, dtype=float), (self.g,)).copy()
            self.integrator = Integrator(self.g, self.readings.dt, self.scheme, self.sigma_a, self.relaxation, self.b,
                                         self.discretization)
        if sigma_w is not None:
            self.sigma_w = np.asarray(sigma_w, dtype=float).copy()

    def _inputs_of(self, X):
        """(E, U) of the model's input terms at X (None, None without inputs)."""
        if self.E.shape[1] == 0:
            return None, None
        U = X[:, 3 * self.g:]
        if self.direct is not None:
            U = np.hstack([U, self.direct[1]])
        return self.E, U

    def evaluate(self, X: np.ndarray, p=None) -> list[RowBlock]:
        g, m = self.g, self.m
        E, U = self._inputs_of(X)
        ev = self.model.evaluate(self.t, X, self.q_guess, E, U)
        self._trial = ev
        if not np.all(ev.ok):
            bad = np.flatnonzero(~np.asarray(ev.ok))
            return [RowBlock("assembly", bad, np.full((bad.size, 1), np.inf), np.zeros((bad.size, 1, self.b)))]
        eom = eom_rows(X, g, ev.f, ev.F, self.sigma_a, None if not m else ev.G[:, :, :m])
        if not self.first_eom:
            eom = RowBlock(eom.name, eom.idx[1:], eom.r[1:], eom.Ji[1:])
        rows = [prior_rows(X, g, self.prior_mean, self.prior_sqrt_info, self.model.angular), eom, self.integrator.rows(X)]
        rows += [observation_rows(self.model, ev, s, self.b, self.sensor_scale.get(s.name))
                 for s in self.readings.sensors if s.idx.size]
        if m:
            rows.append(inp.walk_rows(X, g, self.sigma_w))
            if self.first_eom:
                rows.append(inp.prior_rows(X, g, self.input_mean, self.inputs.sigma0))
            for s in self.readings.inputs:
                j = self.inputs.channel_of(s.name)
                if j is not None and s.idx.size:
                    sensor = next(x for x in self.inputs.sensors[j] if x.name == s.name)
                    rows.append(inp.measured_rows(X, g, j, s, sensor.gain, self.input_weights[s.name]))
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
