"""The sensor YAML schema: every key of a ``sensors:`` entry, by type, in ONE table.

:mod:`mbde_core.sensors.config` checks entries against it (``COMMON``, ``SPECIFIC``) and
the documentation's sensor reference is generated from it. Units are SI; offsets and axis
angles are in the body frame of the mechanism YAML (origin at the body's first point, x
towards its second, y to the left).
"""
from __future__ import annotations

from mbde_core.config.schema import Key, Section

NUM = "number or expression"
BODY = "body name or index (from 0)"

COMMON_KEYS = Section("sensors[i]", "Every sensor", "Keys of every entry of a `sensors:` list.", (
    Key("name", "string without spaces", "unique; the default frame_id and topic suffix", required=True),
    Key("type", "sensor type", "one of the types below", required=True),
    Key("rate", NUM, "reading rate (or `period`)", "Hz"),
    Key("period", NUM, "reading period (or `rate`)", "s"),
    Key("topic", "absolute topic name", "where the readings are published (sensor_msgs/Imu for gyroscope, "
        "accelerometer, imu; sensor_msgs/JointState for encoder, slider_position, point_position, effort)",
        default="`/mbde/sensors/<name>`"),
    Key("frame_id", "string", "the readings' `header.frame_id`; its TF frame hangs below the body; the live "
        "estimator counts readings in another frame", default="the name"),
    Key("noise", "mapping (below)", "the reading's noise; `sigma` required", required=True),
))

NOISE = Section("sensors[i].noise", "Noise", "In the units of the reading (rad, rad/s, m/s^2, m); a number, or "
                "one per channel.", (
    Key("sigma", NUM + " or list", "white-noise standard deviation", "reading", required=True),
    Key("bias", NUM + " or list", "constant bias", "reading", default="0"),
    Key("bias_random_walk", NUM + " or list", "bias random-walk density", "reading/sqrt(s)", default="0"),
    Key("quantization", NUM + " or list", "reading step (encoders: 2 pi / counts_per_revolution)", "reading",
        default="0"),
    Key("dropout", NUM, "probability of a lost sample, in [0, 1]", default="0"),
))

# type: (what it reads [unit], channels, keys of its own)
TYPES = {
    "encoder": ("the body's angle against the reference body [rad]", 1, (
        Key("body", BODY, "the body whose angle is read", required=True),
        Key("reference_body", BODY + " or `ground`", "the body it is measured against", default="ground"),
        Key("counts_per_revolution", "integer", "sets quantization = 2 pi / counts"),
        Key("joint_name", "string", "the JointState's joint name", default="the name"),
        Key("offset", NUM, "added to the reading", "rad", default="0"),
    )),
    "gyroscope": ("the body's angular velocity [rad/s]", 1, (
        Key("body", BODY, "the body it is mounted on", required=True),
    )),
    "accelerometer": ("specific force along each axis [m/s^2] (reads -g at rest: +9.81 upwards)", "1 or 2", (
        Key("body", BODY, "mounted on a body (axes relative to the body's x axis); or `point` or `slider`"),
        Key("offset", "[xi, eta] of " + NUM, "position on the body, body frame (body mounts only)", "m",
            default="[0, 0]"),
        Key("point", "point name or index (from 0)", "moves with a point (axes in the world frame)"),
        Key("slider", "slider name or index (from 0)", "moves with a slider's point (axes relative to its track)"),
        Key("axes", "list of 1 or 2 " + NUM, "axis angles: one channel per axis", "rad", default="[0]"),
    )),
    "imu": ("gyro z [rad/s] and accelerometer x, y [m/s^2] in one sensor_msgs/Imu", 3, (
        Key("body", BODY, "the body it is mounted on", required=True),
        Key("offset", "[xi, eta] of " + NUM, "position on the body, body frame", "m", default="[0, 0]"),
        Key("axis_angle", NUM, "the IMU's x axis against the body's x axis", "rad", default="0"),
    )),
    "slider_position": ("the slider's position along its track, from its origin [m]", 1, (
        Key("slider", "slider name or index (from 0)", "the slider", required=True),
        Key("joint_name", "string", "the JointState's joint name", default="the name"),
    )),
    "point_position": ("x, y of a point [m] (a camera or motion-capture marker), JointState joints "
                       "`<joint_name>_x`, `<joint_name>_y`", 2, (
        Key("point", "point name or index (from 0)", "the tracked moving point", required=True),
        Key("joint_name", "string", "prefix of the JointState's joint names", default="the name"),
    )),
    "effort": ("a measured generalized force on a coordinate [N m or N]: a motor's torque (ros2_control's "
               "`JointState.effort`), or a current / voltage times `gain`; a known input of the dynamics, "
               "not a function of the state", 1, (
        Key("coordinate", "coordinate name or index (from 0)", "the coordinate of q the force drives (a crank "
            "angle: the motor torque)", required=True),
        Key("joint_name", "string", "the JointState's joint name", default="the name"),
        Key("gain", NUM, "force per unit of the reading (a motor's torque constant; `mbde identify` can estimate "
            "it as `sensors.<name>.gain`)", "N m or N per unit", default="1"),
        Key("field", "`effort`, `position` or `velocity`", "the JointState array that carries the reading",
            default="`effort`"),
        Key("hold", "`zero` or `linear`", "the force between readings: `zero` held until the next (a driver's "
            "command updated at the reading rate), `linear` changing continuously (a measured current, a "
            "controller faster than the readings)", default="`zero`"),
    )),
}

COMMON = COMMON_KEYS.names()
SPECIFIC = {kind: tuple(k.name for k in keys) for kind, (_, _, keys) in TYPES.items()}
