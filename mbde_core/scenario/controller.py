"""PI speed controller of a driven coordinate: the motor of paper 004 (sec. 5.1-5.2).

Paper 004 drives its slider-crank with a servo whose controller receives a target crank
speed (a 10 s profile of three levels, 40 -> 50 -> 60 rad/s) and determines the motor
torque T; the torque is the unknown input the ADE-KF estimates. The simulator models that
servo as a discrete PI controller on the rate qd_c of one coordinate c (the crank angle),
sampled at every internal step h with a zero-order hold:

    e_k = r(t_k) - qd_c(t_k)                   speed error [rad/s] (or m/s)
    I_k = I_{k-1} + h e_k                       integral of the error
    u_k = sat(kp e_k + ki I_k, +-torque_limit)  generalized force on c, held on [t_k, t_k+h)

with conditional-integration anti-windup: while the output saturates and the error
pushes further into the limit, the integral is not updated (I_k = I_{k-1}). The torque
acts as a generalized force on coordinate c (for an angle coordinate this is exactly
the motor torque on the crank, virtual work u dtheta). It is part of the *true* system
only: from the estimator's point of view it is the unknown input force.

The target r(t) is a time function: a number, an expression in ``t``, ``{table: [[t,
v], ...]}`` (linear interpolation) or ``{steps: [[t, v], ...]}`` (piecewise constant:
the value of the last row with t_i <= t; before the first row, its value).

Scenario section ``speed_controller``::

    speed_controller:
      name: motor                                # default motor
      coordinate: theta                          # the driven coordinate (required)
      target: {steps: [[0, 40], [3.3, 50]]}      # rad/s or m/s, a time function (required)
      kp: 1.2                                    # proportional gain [N m s/rad] (required)
      ki: 40                                     # integral gain [N m/rad], default 0
      torque_limit: 5                            # |u| bound [N m or N], default none
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from mbde_core.config.yamlnode import Node
from mbde_core.model.loader_items import time_function
from mbde_core.model.spec import TimeFunction

KEYS = ("name", "coordinate", "target", "kp", "ki", "torque_limit")


@dataclass(frozen=True)
class SpeedControllerSpec:
    """Parameters of the PI speed controller (see the module docstring).

    name: input name (recorded as the true input, e.g. 'motor'); coordinate: index into q
    of the driven coordinate; target: r(t) [rad/s]; kp [N m s/rad]; ki [N m/rad];
    torque_limit [N m] (inf = none).
    """

    name: str
    coordinate: int
    target: TimeFunction
    kp: float
    ki: float
    torque_limit: float = float("inf")


class PIController:
    """Stateful discrete PI controller with saturation and anti-windup."""

    def __init__(self, spec: SpeedControllerSpec, h: float):
        self.spec = spec
        self.h = float(h)
        self.integral = 0.0
        self.output = 0.0

    def update(self, t: float, rate: float) -> float:
        """Torque u_k for the step starting at t, given the coordinate rate qd_c(t)."""
        s = self.spec
        e = s.target(t) - rate
        integral = self.integral + self.h * e
        u = s.kp * e + s.ki * integral
        if abs(u) > s.torque_limit:
            u = float(np.clip(u, -s.torque_limit, s.torque_limit))
            if np.sign(e) == np.sign(u):
                integral = self.integral  # conditional integration (anti-windup)
        self.integral = integral
        self.output = u
        return u


class HeldInput:
    """A scalar input held between updates; callable as a time function (value ignores t)."""

    def __init__(self, value: float = 0.0):
        self.value = float(value)

    def __call__(self, t: float) -> float:
        return self.value


def step_function(node: Node, variables) -> TimeFunction:
    """``{steps: [[t, v], ...]}`` -> piecewise-constant TimeFunction (times increasing)."""
    node.mapping(required=("steps",))
    rows = node.get("steps").sequence(min_len=1)
    ts, vs = [], []
    for r in rows:
        t_i, v_i = r.vector(2, variables)
        if ts and t_i <= ts[-1]:
            raise r.error("step times must increase strictly")
        ts.append(t_i)
        vs.append(v_i)

    def value(t, ts=ts, vs=vs):
        return vs[max(bisect.bisect_right(ts, t) - 1, 0)]

    return TimeFunction(("steps", tuple(zip(ts, vs))), value)


def target_function(node: Node, variables) -> TimeFunction:
    """A speed profile: number, expression in t, {table: ...} or {steps: ...}."""
    if isinstance(node.value, dict) and "steps" in node.value:
        return step_function(node, variables)
    return time_function(node, variables)


def parse_speed_controller(node: Node, coord_index: dict[str, int], variables) -> SpeedControllerSpec:
    """SpeedControllerSpec from the scenario's ``speed_controller`` mapping."""
    node.mapping(required=("coordinate", "target", "kp"), optional=KEYS)
    cnode = node.get("coordinate")
    if not isinstance(cnode.value, str) or cnode.value not in coord_index:
        raise cnode.error(f"unknown coordinate {cnode.value!r} (coordinates: {', '.join(coord_index)})")
    name = node.get("name").string() if node.has("name") else "motor"
    kp = node.get("kp").number(variables, nonnegative=True)
    ki = node.get("ki").number(variables, nonnegative=True) if node.has("ki") else 0.0
    limit = node.get("torque_limit").number(variables, positive=True) if node.has("torque_limit") else float("inf")
    return SpeedControllerSpec(name, coord_index[cnode.value], target_function(node.get("target"), variables),
                               kp, ki, limit)
