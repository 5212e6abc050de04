"""Sensors from YAML: a ``sensors:`` list in a mechanism, scenario or separate file.

Each entry::

    - name: gyro_rocker                 # unique; also the default frame_id
      type: gyroscope                   # encoder | gyroscope | accelerometer | slider_position | imu | point_position | effort
      body: rocker                      # body name or index (encoder, gyroscope, imu, body accelerometer)
      rate: 200                         # Hz (or `period: 0.005` s)
      topic: /mbde/sensors/gyro_rocker  # default /mbde/sensors/<name>
      frame_id: gyro_rocker             # default <name>
      noise:                            # SI units of the reading (rad, rad/s, m/s^2, m)
        sigma: 0.3*pi/180               # white noise std (scalar or one per channel)
        bias: 0                         # constant bias
        bias_random_walk: 0             # bias random-walk density [unit/sqrt(s)]
        quantization: 0                 # reading step
        dropout: 0                      # probability of losing a sample

Type-specific keys: encoder ``reference_body`` (default: ground), ``counts_per_revolution``
(quantization 2 pi / counts), ``joint_name``, ``offset`` [rad]; accelerometer ``axes``
(angles [rad], default [0]) with either ``body`` + ``offset: [xi, eta]`` (body frame,
axes relative to the body x axis), ``point`` (axes in the world frame) or ``slider``
(the slider's point, axes relative to its track); slider_position ``slider``,
``joint_name``; imu ``body``, ``offset``, ``axis_angle``; point_position (a camera or
motion-capture marker: x, y of a point [m], JointState joints ``<joint_name>_x/_y``)
``point``, ``joint_name``; effort (a measured generalized force, a known input of the
dynamics: :mod:`mbde_core.sensors.effort`) ``coordinate`` (the coordinate of q it drives,
e.g. the crank angle), ``joint_name``, ``gain`` (generalized force per unit of the
reading: 1 for a torque in N m, the motor gain for a current or a voltage; default 1),
``field`` (the JointState array: effort (default), position or velocity), ``hold`` (how the
force behaves between readings: ``zero`` (default) held until the next, ``linear`` changing
continuously); its noise is in the reading's unit.
"""
from __future__ import annotations

import math
import os

import numpy as np

from mbde_core.config.yamlnode import Node, read_yaml
from mbde_core.errors import ConfigError
from mbde_core.sensors import schema
from mbde_core.sensors.accelerometer import Accelerometer
from mbde_core.sensors.base import NoiseModel
from mbde_core.sensors.effort import FIELDS, HOLDS, Effort
from mbde_core.sensors.encoder import Encoder
from mbde_core.sensors.gyroscope import Gyroscope
from mbde_core.sensors.imu import IMU
from mbde_core.sensors.point_position import PointPosition
from mbde_core.sensors.sensor_set import SensorSet
from mbde_core.sensors.slider_position import SliderPosition

# the keys by type come from the schema (mbde_core/sensors/schema.py), the documentation's source too
TYPES = tuple(schema.TYPES)
COMMON = schema.COMMON
SPECIFIC = schema.SPECIFIC
DIMS = {"encoder": 1, "gyroscope": 1, "slider_position": 1, "imu": 3, "point_position": 2, "effort": 1}


def load_sensors(node: Node, mech) -> SensorSet:
    """SensorSet from a YAML list node (``sensors:``); ConfigError names file and key path."""
    if node.value is None:
        return SensorSet([])
    sensors = []
    seen = set()
    variables = dict(mech.spec.parameters)
    for k, item in enumerate(node.sequence()):
        item.mapping(required=("name", "type"), optional=COMMON + tuple(set(sum(SPECIFIC.values(), ()))))
        kind = item.get("type").string(TYPES)
        for key in item.value:
            if key not in COMMON and key not in SPECIFIC[kind]:
                raise ConfigError(item.file, item.child_path(key), f"not used by a {kind!r} sensor")
        name = item.get("name").string()
        if not name or any(c.isspace() for c in name):
            raise item.get("name").error("sensor names must be non-empty without spaces")
        if name in seen:
            raise item.get("name").error(f"duplicate sensor name {name!r}")
        seen.add(name)
        if item.has("rate") and item.has("period"):
            raise item.error("give either 'rate' (Hz) or 'period' (s), not both")
        if item.has("period"):
            rate = 1.0 / item.get("period").number(variables, positive=True)
        elif item.has("rate"):
            rate = item.get("rate").number(variables, positive=True)
        else:
            raise ConfigError(item.file, item.child_path("rate"), "missing required key (or give 'period')")
        topic = item.get("topic").string() if item.has("topic") else f"/mbde/sensors/{name}"
        if not topic.startswith("/"):
            raise item.get("topic").error("topics must be absolute (start with '/')")
        frame_id = item.get("frame_id").string() if item.has("frame_id") else name
        common = dict(rate=rate, frame_id=frame_id, topic=topic)
        try:
            sensor = _build(kind, name, item, mech, variables, common)
        except (KeyError, ValueError, IndexError) as exc:  # pragma: no cover - guarded above
            raise item.error(str(exc)) from None
        sensors.append(sensor)
    return SensorSet(sensors)


def load_sensor_file(path: str | os.PathLike, mech) -> SensorSet:
    """Sensors from a file holding a top-level ``sensors:`` list."""
    root = read_yaml(path)
    root.mapping(required=("sensors",), optional=("description",))
    return load_sensors(root.get("sensors"), mech)


# ------------------------------------------------------------------------------------------
def _body(item: Node, key: str, mech) -> int:
    node = item.get(key)
    v = node.value
    if isinstance(v, str) and v in mech.body_names:
        return mech.body_names.index(v)
    if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < len(mech.body_names):
        return v
    raise node.error(f"unknown body {v!r} (bodies: {', '.join(mech.body_names)})")


def _point(item: Node, key: str, mech) -> int:
    node = item.get(key)
    v = node.value
    if isinstance(v, str) and v in mech.point_names:
        k = mech.point_names.index(v)
    elif isinstance(v, int) and not isinstance(v, bool) and 0 <= v < mech.n_points:
        k = v
    else:
        raise node.error(f"unknown point {v!r} (points: {', '.join(mech.point_names)})")
    if mech.spec.points[k].fixed:
        raise node.error("a fixed point does not move: choose a moving point")
    return k


def _slider(item: Node, key: str, mech) -> int:
    node = item.get(key)
    names = [s.name for s in mech.spec.sliders]
    v = node.value
    if isinstance(v, str) and v in names:
        return names.index(v)
    if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < len(names):
        return v
    raise node.error(f"unknown slider {v!r} (sliders: {', '.join(names) or 'none'})")


def _noise(item: Node, dim: int, variables, quantization: float = 0.0) -> NoiseModel:
    node = item.get("noise")
    if node.value is None:
        raise ConfigError(item.file, item.child_path("noise"), "missing required key (at least noise.sigma)")
    node.mapping(required=schema.NOISE.required(), optional=schema.NOISE.names())

    def per_channel(key, default=0.0):
        if not node.has(key):
            return np.full(dim, default)
        child = node.get(key)
        if isinstance(child.value, list):
            vals = child.vector(dim, variables)
        else:
            vals = [child.number(variables)] * dim
        return np.array(vals, dtype=float)

    sigma = per_channel("sigma")
    if np.any(sigma < 0):
        raise node.get("sigma").error("must be >= 0")
    rw = per_channel("bias_random_walk")
    if np.any(rw < 0):
        raise node.get("bias_random_walk").error("must be >= 0")
    quant = per_channel("quantization", quantization)
    if np.any(quant < 0):
        raise node.get("quantization").error("must be >= 0")
    dropout = node.get("dropout").number(variables, minimum=0.0, maximum=1.0) if node.has("dropout") else 0.0
    return NoiseModel(sigma, per_channel("bias"), rw, quant, dropout)


def _build(kind, name, item: Node, mech, variables, common):
    if kind == "encoder":
        body = _body(item, "body", mech)
        ref = _body(item, "reference_body", mech) if item.has("reference_body") and item.get("reference_body").value != "ground" else -1
        if ref == body:
            raise item.get("reference_body").error("an encoder cannot measure a body against itself")
        quant = 0.0
        if item.has("counts_per_revolution"):
            quant = 2 * math.pi / item.get("counts_per_revolution").number(variables, positive=True, integer=True)
        joint = item.get("joint_name").string() if item.has("joint_name") else None
        offset = item.get("offset").number(variables) if item.has("offset") else 0.0
        return Encoder(mech, name, body=body, reference_body=ref, joint_name=joint, offset=offset,
                       noise=_noise(item, 1, variables, quant), **common)
    if kind == "gyroscope":
        return Gyroscope(mech, name, body=_body(item, "body", mech), noise=_noise(item, 1, variables), **common)
    if kind == "slider_position":
        joint = item.get("joint_name").string() if item.has("joint_name") else None
        return SliderPosition(mech, name, slider=_slider(item, "slider", mech), joint_name=joint,
                              noise=_noise(item, 1, variables), **common)
    if kind == "point_position":
        joint = item.get("joint_name").string() if item.has("joint_name") else None
        return PointPosition(mech, name, point=_point(item, "point", mech), joint_name=joint,
                             noise=_noise(item, 2, variables), **common)
    if kind == "effort":
        return _effort(name, item, mech, variables, common)
    if kind == "imu":
        offset = item.get("offset").vector(2, variables) if item.has("offset") else (0.0, 0.0)
        angle = item.get("axis_angle").number(variables) if item.has("axis_angle") else 0.0
        return IMU(mech, name, body=_body(item, "body", mech), offset=offset, axis_angle=angle,
                   noise=_noise(item, 3, variables), **common)
    # accelerometer
    mounts = [k for k in ("body", "point", "slider") if item.has(k)]
    if len(mounts) != 1:
        raise item.error("an accelerometer needs exactly one of 'body', 'point' or 'slider'")
    axes = item.get("axes").vector(None, variables) if item.has("axes") else [0.0]
    if not 1 <= len(axes) <= 2:
        raise item.get("axes").error("give one or two axis angles")
    if mounts[0] == "body":
        offset = item.get("offset").vector(2, variables) if item.has("offset") else (0.0, 0.0)
        return Accelerometer(mech, name, axes=axes, body=_body(item, "body", mech), offset=offset,
                             noise=_noise(item, len(axes), variables), **common)
    if item.has("offset"):
        raise item.get("offset").error("'offset' applies to body-mounted accelerometers only")
    if mounts[0] == "point":
        return Accelerometer(mech, name, axes=axes, point=_point(item, "point", mech),
                             noise=_noise(item, len(axes), variables), **common)
    si = _slider(item, "slider", mech)
    s = mech.spec.sliders[si]
    track = math.atan2(s.direction[1], s.direction[0])
    return Accelerometer(mech, name, axes=[track + a for a in axes], point=s.point,
                         noise=_noise(item, len(axes), variables), **common)


def _effort(name, item: Node, mech, variables, common) -> Effort:
    if not item.has("coordinate"):
        raise ConfigError(item.file, item.child_path("coordinate"), "missing required key (the coordinate it drives)")
    node = item.get("coordinate")
    names = list(mech.coordinate_names)
    v = node.value
    if isinstance(v, str) and v in names:
        col = names.index(v)
    elif isinstance(v, int) and not isinstance(v, bool) and 0 <= v < len(names):
        col = v
    else:
        raise node.error(f"unknown coordinate {v!r} (coordinates: {', '.join(names)})")
    gain = item.get("gain").number(variables) if item.has("gain") else 1.0
    if not math.isfinite(gain) or gain == 0.0:
        raise item.get("gain").error(f"must be a finite non-zero number, got {gain}")
    field = item.get("field").string(FIELDS) if item.has("field") else "effort"
    joint = item.get("joint_name").string() if item.has("joint_name") else None
    hold = item.get("hold").string(HOLDS) if item.has("hold") else "zero"
    return Effort(mech, name, coordinate=col, joint_name=joint, gain=gain, field=field, hold=hold,
                  noise=_noise(item, 1, variables), **common)
