"""An ordered collection of sensors with stacked evaluation."""
from __future__ import annotations

import numpy as np


class SensorSet:
    """Sensors by name, in configuration order.

    Iteration, ``len``, ``in``, ``[name]`` and ``names`` cover the *measurement* sensors
    (readings h(q, qd, qdd)); sensors of known inputs (``is_input``: a measured motor
    torque, :mod:`mbde_core.sensors.effort`) given in ``sensors`` are kept apart in
    ``inputs`` (by name: :meth:`input`). ``ordered`` is every sensor in the given order.
    """

    def __init__(self, sensors, inputs=()):
        given = list(sensors)
        self.sensors = [s for s in given if not getattr(s, "is_input", False)]
        self.inputs = [s for s in given if getattr(s, "is_input", False)] + list(inputs)
        self.ordered = given + list(inputs)
        self.by_name = {s.name: s for s in self.sensors}
        self.inputs_by_name = {s.name: s for s in self.inputs}
        if len(self.by_name) + len(self.inputs_by_name) != len(self.ordered) or set(self.by_name) & set(self.inputs_by_name):
            raise ValueError("duplicate sensor names")

    def __iter__(self):
        return iter(self.sensors)

    def __len__(self):
        return len(self.sensors)

    def __getitem__(self, name):
        return self.by_name[name]

    def __contains__(self, name):
        return name in self.by_name

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.sensors]

    @property
    def input_names(self) -> list[str]:
        return [s.name for s in self.inputs]

    def input(self, name):
        """The known-input sensor ``name`` (KeyError if none)."""
        return self.inputs_by_name[name]

    def subset(self, names) -> "SensorSet":
        """The named measurement sensors, with every known-input sensor."""
        return SensorSet([self.by_name[n] for n in names], self.inputs)

    def h(self, names, q, qd=None, qdd=None) -> np.ndarray:
        """Stacked readings of the named sensors: (sum d,) or (N, sum d)."""
        return np.concatenate([self.by_name[n].h(q, qd, qdd) for n in names], axis=-1)

    def uses_qdd(self, names=None) -> bool:
        return any(self.by_name[n].uses_qdd for n in (names or self.names))

    def describe(self) -> list[dict]:
        return [s.describe() for s in self.ordered]
