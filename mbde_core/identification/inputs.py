"""Known inputs in identification: a recorded control signal times a motor gain.

Paper 001 sec. 4.3 drives its pendulums with a DC motor whose torque is proportional to
the recorded control signal, tau = K u_in, and identifies the motor gain K. Here a
known-input sensor (:mod:`mbde_core.sensors.effort`: a reading y of the generalized force
gain * y on one coordinate) in the mechanism file's ``sensors:`` section has an
identifiable ``gain`` (key path ``sensors.<name>.gain``).

In the joint problem the known inputs enter without states (the ``direct`` inputs of
:class:`~mbde_core.trajectory.problem.SmootherProblem`): on the grid, u_j(t_i) = K_j
y_j(t_i) (the readings interpolated linearly between their stamps, held before the first
and after the last), a generalized force on coordinate c_j, so zdd = f + G_d u with G_d =
Mbar^-1 R^T E_d, and the gain's column of the eom rows r = (zdd - f - G_d u) / sigma_a is

    dr/dK_j = -G_d[:, j] y_j / sigma_a

(the model's G at the current states, :class:`~mbde_core.trajectory.model.StepEval`).
The readings' noise is not a state here: it adds to the eom residuals, whose sigma the
noise re-estimation sets (a control signal is recorded exactly).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mbde_core.errors import ConfigError
from mbde_core.identification.parameter import Parameter


def sensor_gain_parameters(doc, file, path, ref, field, sub, items_of, select) -> list:
    """Parameters ``sensors.<name>.gain`` of the effort sensors of the mechanism document."""
    items = [(i, name, it) for i, name, it in items_of(doc, "sensors", "sensor")
             if isinstance(it, dict) and it.get("type") == "effort"]
    if field != "gain" or sub:
        raise ConfigError(file, path, "sensors have one identifiable field: gain (of a known-input 'effort' sensor)")
    if not items:
        raise ConfigError(file, path, "the mechanism file's sensors: section has no known-input (type: effort) sensor")
    hits = select(items, ref, "effort sensor", file, path)
    return [Parameter(f"sensors[{i}].gain", f"sensors.{name}.gain", ("doc", ("sensors", i, "gain")), "per unit")
            for i, name, _ in hits]


def sensor_gain_value(spec, where) -> float:
    """The gain of sensor item ``where[1]`` of the mechanism file (1 if not given)."""
    items = spec.sensors or []
    item = items[where[1]] if where[1] < len(items) else {}
    return float(item.get("gain", 1.0)) if isinstance(item, dict) else 1.0


@dataclass
class KnownInputs:
    """The known-input readings of one recording on its grid: E (n, k) their coordinates,
    Y (N, k) the readings, names (k,), gains (k,) of the sensors as configured."""

    E: np.ndarray
    Y: np.ndarray
    names: list
    gains: np.ndarray

    @property
    def k(self) -> int:
        return len(self.names)

    def forces(self, gains=None) -> np.ndarray:
        """U (N, k) = gain * y."""
        return self.Y * (self.gains if gains is None else np.asarray(gains, float))[None, :]


def known_inputs(readings, sensors, n: int) -> KnownInputs | None:
    """The known inputs of ``readings`` (their ``inputs`` rows; sensors: the SensorSet), or None."""
    rows = [r for r in readings.inputs if r.idx.size]
    if not rows:
        return None
    grid = np.arange(readings.N)
    E = np.zeros((n, len(rows)))
    Y = np.empty((readings.N, len(rows)))
    gains = np.empty(len(rows))
    for j, r in enumerate(rows):
        s = sensors.input(r.name)
        E[s.coordinate, j] = 1.0
        Y[:, j] = np.interp(grid, r.idx, r.values[:, 0])
        gains[j] = s.gain
    return KnownInputs(E, Y, [r.name for r in rows], gains)
