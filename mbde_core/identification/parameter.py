"""One identifiable scalar of a mechanism or sensor document (:class:`Parameter`)."""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Parameter:
    """One identifiable scalar.

    key: canonical key path in the YAML document (e.g. ``planar_bodies[0].mass``);
    label: the readable name used in reports (e.g. ``bodies.crank.mass``);
    target: where the value lives: ('doc', path tuple) for a plain field,
    ('gravity', None) for the magnitude, ('gravity_tilt', None) for its direction,
    ('joint', (point, body, body2)) for a joint's damping, ('joint_friction', (point,
    body, body2)) for its dry friction; unit: SI unit string; lower/upper: box bounds.
    """

    key: str
    label: str
    target: tuple
    unit: str
    lower: float = -math.inf
    upper: float = math.inf
