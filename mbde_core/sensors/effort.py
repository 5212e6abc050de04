"""A measured generalized force: a motor's torque (or a slide's force) as a known input.

A robot's motor driver usually reports what it does: ros2_control's
joint_state_broadcaster publishes the torque in ``sensor_msgs/JointState.effort``, other
drivers a current or the commanded voltage. Such a reading is not a function h(q, qd,
qdd) of the state but an *input* of the dynamics: the generalized force

    Q_u = e_c u,   u = gain * y   (reading y, gain [N m or N per unit of y], default 1)

on the coordinate c of q it drives (a crank angle: the motor torque; a slider's point
coordinate: a linear motor's force), with variance gain^2 (sigma_y^2 + step^2 / 12) from
the reading's noise model. A motor model of paper 001 sec. 4.3: torque = K u_in with the
control signal u_in and the motor gain K, which ``mbde identify`` can estimate
(``sensors.<name>.gain``).

The accelerations with known inputs are those without plus the inputs' share: the
R-matrix dynamics are linear in the applied forces, zdd = Mbar^-1 R^T (Q + E u - M R'zd)
with E (n, m) the unit columns of the inputs' coordinates (:func:`input_matrix`), i.e.
dzdd/du = Mbar^-1 R^T E.

How the force behaves between two readings (``hold``): ``zero`` (the default) -- each
reading holds until the next, as a digital driver's command updated at the reading rate
(the torque over [t_k, t_k+1) is u_k: the Kalman stage holds it from its stamp on, the
smoother ties it to the middle of that interval, t_k + period/2); ``linear`` -- the force
changes continuously and the reading samples it (a measured motor current, a controller
faster than the readings): the line between the readings (the stage predicts into a slot
once its reading is in, :mod:`mbde_core.estimators.stage.inputs`; the smoother ties each
reading to its stamp).

Effort sensors are kept apart from the measurement sensors of a
:class:`~mbde_core.sensors.sensor_set.SensorSet` (its ``inputs``): iterating a SensorSet
gives the h(q, qd, qdd) sensors only. Their readings travel as ordinary
:class:`~mbde_core.types.Measurement` s (sensor name, value (1,) = y) in replay's stream
and the live node's subscriptions.
"""
from __future__ import annotations

import numpy as np

from mbde_core.sensors.base import Sensor

FIELDS = ("effort", "position", "velocity")  # the JointState array that carries the reading
HOLDS = ("zero", "linear")  # how the force behaves between readings (module doc)


class Effort(Sensor):
    """A measured generalized force on coordinate ``coordinate`` (index into q)."""

    kind = "effort"
    msg_type = "sensor_msgs/msg/JointState"
    dim = 1
    is_input = True

    def __init__(self, mech, name, *, coordinate: int, joint_name: str | None = None, gain: float = 1.0,
                 field: str = "effort", hold: str = "zero", **kw):
        if hold not in HOLDS:
            raise ValueError(f"hold must be one of {', '.join(HOLDS)}, got {hold!r}")
        self.coordinate = int(coordinate)
        self.hold = hold
        self.gain = float(gain)
        self.joint_field = field
        self.channels = [joint_name or name]
        super().__init__(mech, name, **kw)

    @property
    def coordinate_name(self) -> str:
        return self.mech.coordinate_names[self.coordinate]

    def force(self, reading) -> np.ndarray:
        """The generalized force gain * y (same shape as the reading)."""
        return self.gain * np.asarray(reading, dtype=float)

    def force_variance(self) -> float:
        """Variance of the generalized force of one reading: gain^2 (sigma^2 + step^2 / 12)."""
        return float(self.gain**2 * self.noise.variance()[0])

    def center_offset(self) -> float:
        """Time [s] from a reading's stamp to the middle of the interval it stands for:
        half the period for a ``zero`` hold, 0 for ``linear`` (module doc)."""
        return 0.5 * self.period if self.hold == "zero" else 0.0

    def reading(self, effort) -> np.ndarray:
        """The noise-free reading (..., 1) of a true generalized input ``effort`` (..., n)
        (the simulator's per-coordinate input forces): effort[c] / gain."""
        e = np.asarray(effort, dtype=float)
        return (e[..., self.coordinate] / self.gain)[..., None]

    def _h(self, q, qd, qdd):
        raise TypeError(f"sensor {self.name!r} measures an input force, not a function of the state")

    def _jac(self, q, qd, qdd):
        raise TypeError(f"sensor {self.name!r} measures an input force, not a function of the state")

    def describe(self) -> dict:
        out = super().describe()
        out.update(coordinate=self.coordinate_name, gain=self.gain, field=self.joint_field, hold=self.hold)
        return out


def input_matrix(n: int, inputs) -> np.ndarray:
    """E (n, m): the unit columns of the coordinates of m inputs (effort sensors or
    coordinate indices): the generalized forces of input values u (m,) are E u."""
    cols = [int(getattr(u, "coordinate", u)) for u in inputs]
    E = np.zeros((n, len(cols)))
    E[cols, np.arange(len(cols))] = 1.0
    return E
