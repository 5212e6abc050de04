"""Model errors applied to the ESTIMATOR's copy of the mechanism (never to the truth).

Scenario section ``model_errors`` (every key optional)::

    model_errors:
      gravity: 1.0                      # m/s^2 added to the gravity magnitude
      bodies:                           # percent errors of a body's length and/or mass
        crank: {length: 2, mass: 2}
      initial_position: {theta: pi/16}  # added to the true initial independent coordinates
      initial_velocity: {theta: 0.0}    # added to the true initial independent velocities

- ``gravity`` (paper 003 sec. 2 and 4): the estimator's model uses
  g_est = g + gravity g / |g|, i.e. the same direction with the magnitude changed by
  ``gravity`` m/s^2 (the benchmark uses 1 and 4). mbde-matlab's ``applyErrors`` adds +1
  to its g = -10 m/s^2, i.e. it *reduces* the magnitude; use ``gravity: -1`` for that.
- ``bodies`` (paper 000 sec. 6.1.2: crank length and mass errors of 1, 2, 3 %): through
  :meth:`Mechanism.modified` with body_scale {body: (1 + length/100, 1 + mass/100)} (the
  length scales the body's geometry and cog, the mass its mass, I0 scales with mass *
  length^2; the estimator's model is re-assembled).
- ``initial_position`` / ``initial_velocity``: the estimator's initial guess is the true
  initial state of the independent coordinates plus these offsets (mbde-matlab's error
  type 2 is ``initial_position: {theta: pi/16}``), assembled on the true branch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from mbde_core.config.yamlnode import Node

KEYS = ("gravity", "bodies", "initial_position", "initial_velocity")


@dataclass(frozen=True)
class ModelErrors:
    """gravity [m/s^2] magnitude error; bodies {body name: (length %, mass %)};
    initial_position / initial_velocity {independent coordinate name: offset}."""

    gravity: float = 0.0
    bodies: dict[str, tuple[float, float]] = field(default_factory=dict)
    initial_position: dict[str, float] = field(default_factory=dict)
    initial_velocity: dict[str, float] = field(default_factory=dict)

    def is_zero(self) -> bool:
        return (self.gravity == 0.0 and all(v == (0.0, 0.0) for v in self.bodies.values())
                and not any(self.initial_position.values()) and not any(self.initial_velocity.values()))

    def describe(self) -> str:
        parts = []
        if self.gravity:
            parts.append(f"gravity {self.gravity:+g} m/s^2")
        for b, (lp, mp) in self.bodies.items():
            parts.append(f"{b} length {lp:+g} %, mass {mp:+g} %")
        for k, v in self.initial_position.items():
            if v:
                parts.append(f"initial {k} {v:+g}")
        for k, v in self.initial_velocity.items():
            if v:
                parts.append(f"initial {k} rate {v:+g}")
        return ", ".join(parts) or "none"


def parse_model_errors(node: Node, mech, variables) -> ModelErrors:
    """ModelErrors from the ``model_errors`` node (None -> no errors); mech = truth model."""
    if node.value is None:
        return ModelErrors()
    node.mapping(optional=KEYS)
    gravity = node.get("gravity").number(variables) if node.has("gravity") else 0.0
    if gravity:
        g = math.hypot(*mech.gravity)
        if g == 0.0:
            raise node.get("gravity").error("the mechanism has no gravity to change")
        if g + gravity < 0:
            raise node.get("gravity").error(f"would make the gravity magnitude negative ({g:g} {gravity:+g})")
    bodies = {}
    if node.get("bodies").value is not None:
        for name, child in node.get("bodies").items():
            if name not in mech.body_names:
                raise child.error(f"unknown body (bodies: {', '.join(mech.body_names)})")
            child.mapping(optional=("length", "mass"))
            lp = child.get("length").number(variables, minimum=-99.0) if child.has("length") else 0.0
            mp = child.get("mass").number(variables, minimum=-100.0) if child.has("mass") else 0.0
            bodies[name] = (lp, mp)
    out = {}
    for key in ("initial_position", "initial_velocity"):
        out[key] = {}
        if node.get(key).value is None:
            continue
        for name, child in node.get(key).items():
            if name not in mech.independent_names:
                raise child.error(f"not an independent coordinate (independent: {', '.join(mech.independent_names)})")
            out[key][name] = child.number(variables)
    return ModelErrors(gravity, bodies, out["initial_position"], out["initial_velocity"])


def estimator_gravity(mech, errors: ModelErrors):
    """The estimator's gravity vector (2,) (None if unchanged)."""
    if not errors.gravity:
        return None
    g = mech.gravity
    return tuple(float(v) for v in g + errors.gravity * (g / math.hypot(*g)))


def body_scale(errors: ModelErrors) -> dict:
    """{body: (length factor, mass factor)} for Mechanism.modified."""
    return {b: (1.0 + lp / 100.0, 1.0 + mp / 100.0) for b, (lp, mp) in errors.bodies.items() if (lp, mp) != (0.0, 0.0)}
