"""Resolved (all-numeric) description of a planar linkage, as read from YAML.

The loader (:mod:`mbde_core.model.loader`) turns a libmbse-format YAML file (plus the
mbde extensions) into a :class:`MechanismSpec`; :class:`mbde_core.model.mechanism.Mechanism`
builds the natural-coordinate model from it. Point and body references are indices.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np


@dataclass(frozen=True)
class PointSpec:
    name: str
    x: float
    y: float
    fixed: bool


@dataclass(frozen=True)
class BodySpec:
    """A rigid planar body through >= 2 points.

    The body frame has its origin at the first point and its x axis towards the second
    point; ``cog`` (2,) is in that frame, ``I0`` is the moment of inertia about the first
    point [kg m^2], ``length`` the distance between the first two points [m].
    """

    name: str
    points: tuple[int, ...]
    length: float
    mass: float
    I0: float
    cog: tuple[float, float]


@dataclass(frozen=True)
class RelativeCoordinateSpec:
    """An angle coordinate appended to q: the absolute angle of the segment a->b [rad]."""

    name: str
    kind: str
    points: tuple[int, int]


@dataclass(frozen=True)
class SliderSpec:
    """Point ``point`` constrained to the fixed line through ``origin`` along ``direction``.

    ``mass`` [kg] is an optional point mass (the slider block) carried by that point.
    """

    name: str
    point: int
    origin: tuple[float, float]
    direction: tuple[float, float]
    mass: float = 0.0


@dataclass(frozen=True)
class TimeFunction:
    """A scalar function of time: constant, expression in ``t``, or a (t, value) table."""

    source: Any
    fn: Callable[[float], float]

    def __call__(self, t: float) -> float:
        return self.fn(t)

    def is_constant(self) -> bool:
        return isinstance(self.source, (int, float))


@dataclass(frozen=True)
class LoadSpec:
    """An applied load. ``kind`` is one of

    - ``force``: constant or time-varying force ``value`` = (fx, fy) [N] at ``point``;
    - ``torque``: torque ``value`` [N m] (counter-clockwise positive) on ``body``;
    - ``generalized_force``: force/torque ``value`` on coordinate ``coordinate`` of q
      (e.g. a motor torque on a relative angle);
    - ``joint_damping``: viscous torque -c (w_b - w_a) [N m s/rad] between ``body`` and
      ``body2`` (``body2`` = -1 for the ground);
    - ``point_damping``: viscous force -c v [N s/m] at ``point`` (e.g. slider friction);
    - ``joint_friction``: dry (regularised Coulomb) torque -c s(w_b - w_a) [N m] between
      ``body`` and ``body2``, s(w) = w / sqrt(w^2 + scale^2) (``scale`` [rad/s]: the
      ``velocity_scale`` of the regularisation, :mod:`mbde_core.model.loads`);
    - ``point_friction``: dry force -c v / sqrt(|v|^2 + scale^2) [N] at ``point``.
    """

    kind: str
    name: str
    point: int = -1
    body: int = -1
    body2: int = -1
    coordinate: int = -1
    value: tuple[TimeFunction, ...] = ()
    c: float = 0.0
    scale: float = 0.0


@dataclass(frozen=True)
class DriverSpec:
    """A time-dependent driving constraint (see :mod:`mbde_core.model.drivers`).

    - ``coordinate``: q[coordinate] = position(t);
    - ``distance``: the distance of the two points of ``body`` = position(t) (its length).

    ``velocity``/``acceleration``: the derivatives of ``position`` when given (else
    finite differences).
    """

    kind: str
    name: str
    position: TimeFunction
    velocity: TimeFunction | None = None
    acceleration: TimeFunction | None = None
    coordinate: int = -1
    body: int = -1


@dataclass(frozen=True)
class MechanismSpec:
    file: str
    name: str
    parameters: dict[str, float]
    gravity: tuple[float, float]
    points: tuple[PointSpec, ...]
    bodies: tuple[BodySpec, ...]
    relative_coordinates: tuple[RelativeCoordinateSpec, ...] = ()
    sliders: tuple[SliderSpec, ...] = ()
    loads: tuple[LoadSpec, ...] = ()
    drivers: tuple[DriverSpec, ...] = ()
    independent: tuple[int, ...] | None = None  # indices into q, None = automatic
    initial_velocity: dict[int, float] = field(default_factory=dict)  # q index -> value
    initial_position: dict[int, float] = field(default_factory=dict)  # q index -> value
    sensors: Any = None  # raw `sensors:` section, validated by mbde_core.sensors
    raw: Any = None  # the YAML document as read

    def replace(self, **changes) -> "MechanismSpec":
        return replace(self, **changes)

    # -- naming helpers ---------------------------------------------------------------
    def coordinate_names(self) -> list[str]:
        """Names of q: '<point>.x', '<point>.y' for moving points, then relative coordinates."""
        names = []
        for p in self.points:
            if not p.fixed:
                names += [f"{p.name}.x", f"{p.name}.y"]
        return names + [r.name for r in self.relative_coordinates]

    def point_xy(self) -> np.ndarray:
        return np.array([[p.x, p.y] for p in self.points], dtype=float)
