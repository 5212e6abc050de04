"""An ordered collection of sensors with stacked evaluation."""
from __future__ import annotations

import numpy as np


class SensorSet:
    """Sensors by name, in configuration order."""

    def __init__(self, sensors):
        self.sensors = list(sensors)
        self.by_name = {s.name: s for s in self.sensors}
        if len(self.by_name) != len(self.sensors):
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

    def subset(self, names) -> "SensorSet":
        return SensorSet([self.by_name[n] for n in names])

    def h(self, names, q, qd=None, qdd=None) -> np.ndarray:
        """Stacked readings of the named sensors: (sum d,) or (N, sum d)."""
        return np.concatenate([self.by_name[n].h(q, qd, qdd) for n in names], axis=-1)

    def uses_qdd(self, names=None) -> bool:
        return any(self.by_name[n].uses_qdd for n in (names or self.names))

    def describe(self) -> list[dict]:
        return [s.describe() for s in self.sensors]
