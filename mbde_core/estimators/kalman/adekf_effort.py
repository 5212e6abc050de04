"""The ADE-KF with a measured motor torque: a known input with its noise (paper 004's model).

The ADE-KF estimates the unknown inputs a as random-walk states of x = [z, zd, a]
(paper 004 eqs. 29-31; :mod:`adekf`). A known-input sensor (a motor driver's torque,
:mod:`mbde_core.sensors.effort`, u = gain * y on the natural coordinate c) adds the
generalized force E u to the model; with an input ``{coordinate: c}`` (the default one per
independent coordinate) the two forces add, and the input state is their sum

    a_i = u_held + r,

r the force the torque does not explain (a friction the model lacks, the motor's error),
whose random walk r_a now carries only that: when the stage's held reading changes from
u_old to u_new, a_i moves by u_new - u_old (r is kept), so every prediction (eq. 33) and
every reading (the accelerometers', eqs. 44-51) sees the measured torque. Its uncertainty
(the stage's variance var of the held reading: the sensor's noise and the hold's error,
:mod:`~mbde_core.estimators.stage.inputs`) enters as process noise through the input's
columns of F = I + dt A (eqs. 35-41), i.e. dzdd/du = dzdd/da_i:

    P' = F P F^T + R_x + var G G^T,   G = dt A[:, i] with the input's own row 0

(the marginal of the augmented [x, u], u ~ N(u_held, var) held over the step, as the
other Kalman observers' :func:`~mbde_core.estimators.kalman.input_states.known_input_state`).
Reported: a_i, the whole force on the coordinate (as with the torque unknown).
Measured on paper 004's slider-crank with the torque read at 1 kHz (slider friction in the
truth only; seed 1, 4 s, after 1 s): 0.0048 rad against 0.0092 with the torque unknown;
the same readings taken as a reading of the input state instead (y_u = a_i + e, a_i then
the motor torque alone) gave 0.029 rad -- the friction has no other place to go.

A known-input sensor on a coordinate without such an input state is not used (its force
would need the model's dzdd/du on that coordinate; ``known_inputs_unused`` in the
diagnostics names it).
"""
from __future__ import annotations

import numpy as np


class MeasuredInputs:
    """Mixin of :class:`~mbde_core.estimators.kalman.adekf.ADEKF`: the measured torques as
    known inputs with their noise (module doc). Call :meth:`_init_measured` in ``__init__``;
    the prediction steps with :meth:`_euler_known`."""

    def _init_measured(self) -> None:
        known = list(getattr(self.sensors, "inputs", ()))
        self._measured = []  # (index of the held input, index of the input state in x)
        unused = []
        for j, s in enumerate(known):
            hit = [i for i, spec in enumerate(self.inputs) if spec.kind == "coordinate" and spec.column == int(s.coordinate)]
            if hit:
                self._measured.append((j, 2 * self.g + hit[0]))
            else:
                unused.append(s.name)
        self.known_unused = unused
        self._applied = None  # the held torques in the input states (module doc)
        self._var = None

    def set_known_inputs(self, values, variances) -> None:
        """The stage's held torques and their variances for the next step: the input states
        move by the change of the held torque (module doc)."""
        if not self._measured:
            return
        j = [a for a, _ in self._measured]
        u = np.asarray(values, dtype=float)[j]
        self._var = np.maximum(np.asarray(variances, dtype=float)[j], 0.0)
        du = u if self._applied is None else u - self._applied
        self._applied = u
        if du.any():
            idx = np.array([b for _, b in self._measured])
            self._shift(idx, du)
            if getattr(self, "_alt", None) is not None:  # the outlier hypothesis holds the same torque
                self._swap()
                self._shift(idx, du)
                self._swap()

    def _shift(self, idx, du) -> None:
        x = self.x.copy()
        x[idx] += du
        self.x, self._lin = x, None

    def _euler_known(self, dt: float, Qd: np.ndarray) -> None:
        """One forward-Euler step with the held torques' variance as process noise (module doc)."""
        if self._applied is None:
            return self._euler(dt, Qd)
        idx = np.array([b for _, b in self._measured])
        G = dt * self.linearize().A[:, idx]
        G[idx, :] = 0.0
        self._euler(dt, Qd + (G * self._var) @ G.T)
