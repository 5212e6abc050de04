"""Motor-driven identification cases (paper 001): friction, a tilted stand, a motor gain.

Paper 001 identifies a pendulum's hinge friction (viscous b, dry r mu) from releases and a
Furuta pendulum's friction, the stand's tilt and the motor gain K (torque = K u_in) from
the recorded control signal u_in, with encoders read at 1000 Hz (sec. 4.1) and a pulse as
the control signal (App. G.2). The cases here are that experiment on the simulator:

- ``motor_pendulum``: the pendulum of paper 001 sec. 4.2 (config/mechanisms/
  pendulum_paper001.yaml) with viscous (b = 2e-4 N m s/rad) and dry (r mu = 2e-3 N m,
  regularised over 0.01 rad/s) friction in its hinge, its stand tilted by 0.02 rad, a DC
  motor of gain K = 0.05 N m/V driven by pulses of +1 V (1-1.5 s) and -1 V (2.5-3 s),
  released at rest 0.8-1.2 rad from hanging; a 4096-count encoder at 1000 Hz and the
  control signal (an ``effort`` sensor of gain K: its readings are u_in) at 1000 Hz.
  Identifies b, r mu, the tilt and K.
- ``motor_slider_crank``: the offset slider-crank (config/mechanisms/
  slider_crank_offset.yaml) with viscous (2e-3 N m s/rad) and dry (0.01 N m) friction at
  the crank pivot, dry friction of the slider on its track (0.3 N), a motor of gain
  0.15 N m/V on the crank driven by pulses of +-1 V, released at rest; a 4096-count crank
  encoder and the control signal at 1000 Hz. Identifies the crank's viscous and dry
  friction, the slider's dry friction and K.

``model_errors`` (percent mass changes of bodies the identification does not estimate)
are the "other model errors" of the benchmark's second variant (with unmodelled
acceleration noise), where only a covariance robust to correlated residuals covers.
"""
from __future__ import annotations

import math


def pulses(gain: float, edges) -> dict:
    """{table: ...} of gain * u(t) for pulses [(start, end, volts)] with 1 ms edges."""
    rows = [[0.0, 0.0]]
    for a, b, v in edges:
        rows += [[a - 1e-3, 0.0], [a, gain * v], [b - 1e-3, gain * v], [b, 0.0]]
    return {"table": rows}


K_PENDULUM = 0.05  # N m/V
K_CRANK = 0.15
SIGNAL = [(1.0, 1.5, 1.0), (2.5, 3.0, -1.0)]

MOTOR_CASES = {
    "motor_pendulum": {
        "mechanism": "pendulum_paper001.yaml",
        "loads": [{"name": "hinge_dry", "type": "joint_friction", "body": "arm", "c": 2e-3, "velocity_scale": 0.01},
                  {"name": "motor", "type": "motor", "coordinate": "theta", "value": pulses(K_PENDULUM, SIGNAL)}],
        "sensors": [{"name": "encoder", "type": "encoder", "body": "arm", "rate": 1000, "counts_per_revolution": 4096,
                     "noise": {"sigma": 0}},
                    {"name": "motor_u", "type": "effort", "coordinate": "theta", "gain": K_PENDULUM, "rate": 1000,
                     "hold": "linear", "noise": {"sigma": 0}}],
        "params": "joints.O.damping,joints.O.friction,gravity.tilt,sensors.motor_u.gain",
        "truth": {"gravity.tilt": 0.02},
        "truth_only": ("motor",),
        "model_errors": {"arm": 2.0},  # not an identified parameter: the other model error of variant 2
        "release": ("theta", -math.pi / 2, 0.8, 1.2),
        "releases": 1,
        "duration": 5.0,
    },
    "motor_slider_crank": {
        "mechanism": "slider_crank_offset.yaml",
        "loads": [{"name": "crank_viscous", "type": "joint_damping", "body": "crank", "c": 2e-3},
                  {"name": "crank_dry", "type": "joint_friction", "body": "crank", "c": 0.01},
                  {"name": "slider_dry", "type": "point_friction", "point": "P2", "c": 0.3, "velocity_scale": 0.01},
                  {"name": "motor", "type": "motor", "coordinate": "theta", "value": pulses(K_CRANK, SIGNAL)}],
        "sensors": [{"name": "encoder", "type": "encoder", "body": "crank", "rate": 1000, "counts_per_revolution": 4096,
                     "noise": {"sigma": 0}},
                    {"name": "motor_u", "type": "effort", "coordinate": "theta", "gain": K_CRANK, "rate": 1000,
                     "hold": "linear", "noise": {"sigma": 0}}],
        "params": "joints.A.damping,joints.A.friction,loads.slider_dry.c,sensors.motor_u.gain",
        "truth_only": ("motor",),
        "model_errors": {"rod": 3.0},
        "release": ("theta", 2.0, 0.0, 0.3),
        "releases": 1,
        "duration": 5.0,
    },
}
