"""ROS messages <-> :mod:`mbde_core.types` objects and plain numpy. ROS-free.

Builders take a :class:`~mbde_core.rosio.factory.MessageFactory` and return a new
message; readers take any message object (``rosbags`` dataclass or rclpy) and only read
attributes. Units are SI (rad, rad/s, m/s^2, m, N, N m); times are seconds (float) and are
stored ns-exact in ``header.stamp`` (:mod:`mbde_core.rosio.stamps`).

Every float is copied bit for bit: NaN and inf survive a write/read round trip.
Readers never crash on a malformed message: they raise :class:`mbde_core.errors.DataError`
with a one-line reason, for the caller to count and skip. Builders raise ValueError for
inconsistent arguments (a programming error, not bad data).
"""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from mbde_core.errors import DataError
from mbde_core.rosio.stamps import stamp_to_sec
from mbde_core.types import MechanismSnapshot, Measurement, ParticleCloud

IMU = "sensor_msgs/msg/Imu"
JOINT_STATE = "sensor_msgs/msg/JointState"
MECHANISM_STATE = "mbde_msgs/msg/MechanismState"
PARTICLE_SET = "mbde_msgs/msg/ParticleSet"
STRING = "std_msgs/msg/String"

# IMU channel name -> (vector field, axis, covariance field)
IMU_CHANNELS = {
    f"{kind}_{axis}": (vec, axis, vec + "_covariance")
    for kind, vec in (("gyro", "angular_velocity"), ("accel", "linear_acceleration"))
    for axis in "xyz"
}
NOT_PROVIDED = -1.0  # covariance[0] of a block the sensor does not provide (REP 145)


# ---------------------------------------------------------------- helpers
@contextmanager
def _reading(kind: str):
    """Turn any error raised while reading a ``kind`` message into a one-line DataError."""
    try:
        yield
    except DataError:
        raise
    except (AttributeError, TypeError, ValueError, IndexError, KeyError, OverflowError) as exc:
        raise DataError(f"malformed {kind} message: {exc}".replace("\n", " ")) from None


def _floats(seq, what: str, sizes=None) -> np.ndarray:
    """(n,) float64 copy of a numeric message field; n must be in sizes (if given)."""
    arr = np.array(seq, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{what} is not a flat array")
    if sizes is not None and arr.size not in sizes:
        raise ValueError(f"{what} has {arr.size} elements, expected {' or '.join(map(str, sizes))}")
    return arr


def _names(seq, what: str) -> list[str]:
    names = list(seq)
    if not all(isinstance(n, str) for n in names):
        raise ValueError(f"{what} holds non-string entries")
    return names


def _flat(values, what: str, size: int | None = None) -> np.ndarray:
    """Builder side: values (None = empty) as a flat float64 array of the given size."""
    arr = np.empty(0) if values is None else np.asarray(values, dtype=np.float64).ravel()
    if size is not None and arr.size != size:
        raise ValueError(f"{what}: expected {size} values, got {arr.size}")
    return arr


def _header(factory, msg, t: float, frame_id: str) -> None:
    msg.header.stamp = factory.time(t)
    msg.header.frame_id = str(frame_id)


# ---------------------------------------------------------------- sensor_msgs/Imu
def imu_msg(factory, t: float, *, gyro_z: float | None = None, accel_xy=None,
            gyro_sigma: float | None = None, accel_sigma: float | None = None,
            frame_id: str = ""):
    """sensor_msgs/Imu of a planar IMU (REP 145 conventions).

    t [s]; gyro_z [rad/s] or None; accel_xy (2,) [m/s^2] or None; unused axes are 0.
    gyro_sigma [rad/s] / accel_sigma [m/s^2]: standard deviation of each axis; the block's
    covariance is diag(sigma^2) (3x3, row-major); sigma None -> all zeros ("unknown").
    A block not measured (gyro_z or accel_xy None) gets covariance[0] = -1; orientation is
    never provided: orientation all zeros, orientation_covariance[0] = -1.
    """
    msg = factory.new(IMU)
    _header(factory, msg, t, frame_id)
    for axis in "xyzw":
        setattr(msg.orientation, axis, 0.0)
    msg.orientation_covariance[0] = NOT_PROVIDED
    blocks = (("angular_velocity", None if gyro_z is None else (0.0, 0.0, gyro_z), gyro_sigma),
              ("linear_acceleration",
               None if accel_xy is None else (*_flat(accel_xy, "accel_xy", 2), 0.0), accel_sigma))
    for vec, values, sigma in blocks:
        cov = getattr(msg, vec + "_covariance")
        if values is None:
            cov[0] = NOT_PROVIDED
            continue
        for axis, value in zip("xyz", values):
            setattr(getattr(msg, vec), axis, float(value))
        if sigma is not None:
            for i in (0, 4, 8):
                cov[i] = float(sigma) ** 2
    return msg


def imu_values(msg, channels) -> np.ndarray:
    """(d,) readings of the requested channels ('gyro_z', 'accel_x', 'accel_y', ...).

    Raises DataError if the message is malformed or a requested block is flagged as not
    provided (covariance[0] == -1). Unknown channel names raise ValueError.
    """
    unknown = [c for c in channels if c not in IMU_CHANNELS]
    if unknown:
        raise ValueError(f"unknown IMU channel(s) {unknown}; known: {sorted(IMU_CHANNELS)}")
    with _reading("Imu"):
        out = np.empty(len(channels))
        for i, name in enumerate(channels):
            vec, axis, cov_field = IMU_CHANNELS[name]
            cov = _floats(getattr(msg, cov_field), cov_field, (9,))
            if cov[0] == NOT_PROVIDED:
                raise DataError(f"Imu message does not provide {vec} ({cov_field}[0] = -1)")
            out[i] = float(getattr(getattr(msg, vec), axis))
        return out


def imu_measurement(msg, sensor: str, channels) -> Measurement:
    """Measurement(stamp=header.stamp [s], sensor, value=imu_values(msg, channels))."""
    with _reading("Imu"):
        return Measurement(stamp_to_sec(msg.header.stamp), sensor, imu_values(msg, channels))


# ---------------------------------------------------------------- sensor_msgs/JointState
def joint_state_msg(factory, t: float, names, positions, velocities=None, efforts=None,
                    frame_id: str = ""):
    """sensor_msgs/JointState. names (n,) str; positions (n,) [rad or m];
    velocities / efforts (n,) or None (field left empty)."""
    names = [str(n) for n in names]
    msg = factory.new(JOINT_STATE)
    _header(factory, msg, t, frame_id)
    msg.name = names
    msg.position = factory.array(_flat(positions, "positions", len(names)), "float64")
    if velocities is not None:
        msg.velocity = factory.array(_flat(velocities, "velocities", len(names)), "float64")
    if efforts is not None:
        msg.effort = factory.array(_flat(efforts, "efforts", len(names)), "float64")
    return msg


def joint_state_values(msg, names, field: str = "position") -> list[float | None]:
    """Values of ``field`` ('position' | 'velocity' | 'effort') for the given joint names.

    A name missing from the message, or an empty field, gives None. A field whose length
    differs from ``msg.name`` (and is not empty) raises DataError.
    """
    if field not in ("position", "velocity", "effort"):
        raise ValueError(f"unknown JointState field {field!r}")
    with _reading("JointState"):
        have = _names(msg.name, "name")
        values = _floats(getattr(msg, field), field)
        if values.size == 0:
            return [None for _ in names]
        if values.size != len(have):
            raise ValueError(f"{len(have)} names but {values.size} {field} values")
        index = {}
        for i, name in enumerate(have):
            index.setdefault(name, i)
        return [float(values[index[n]]) if n in index else None for n in names]


# ---------------------------------------------------------------- mbde_msgs/MechanismState
def mechanism_state_msg(factory, snap: MechanismSnapshot, coordinate_names, independent_names,
                        frame_id: str = "", trust=None):
    """mbde_msgs/MechanismState of a snapshot.

    coordinate_names (n,), independent_names (g,); snap.q/qd/qdd (n,) or empty,
    snap.z/zd/zdd (g,) or empty, cov (2g, 2g) or None, branch_probabilities (K,) or None,
    inputs (k,) with k = len(input_names) or None, input_cov (k, k) or None; trust: the
    estimate's verdict (:class:`~mbde_core.estimators.stage.trust.Verdict`: ``level``
    0/1/2 = OK/DEGRADED/LOST and ``reason``) or None (OK, no reason: ground truth). A
    message type built from an mbde_msgs without the trust fields gets none.
    """
    cnames, inames = [str(n) for n in coordinate_names], [str(n) for n in independent_names]
    n, g = len(cnames), len(inames)
    msg = factory.new(MECHANISM_STATE)
    _header(factory, msg, snap.stamp, frame_id)
    msg.coordinate_names, msg.independent_names = cnames, inames
    for field, size in (("q", n), ("qd", n), ("qdd", n), ("z", g), ("zd", g), ("zdd", g)):
        arr = _flat(getattr(snap, field), field)
        if arr.size not in (0, size):
            raise ValueError(f"{field}: expected {size} values (or none), got {arr.size}")
        setattr(msg, field, factory.array(arr, "float64"))
    k = len(snap.input_names)
    optional = (("covariance", snap.cov, 4 * g * g), ("branch_probabilities",
                snap.branch_probabilities, None), ("input_forces", snap.inputs, k),
                ("input_covariance", snap.input_cov, k * k))
    for field, values, size in optional:
        arr = _flat(values, field, None if values is None else size)
        setattr(msg, field, factory.array(arr, "float64"))
    msg.branch = int(snap.branch)
    msg.input_names = [str(s) for s in snap.input_names]
    if trust is not None and hasattr(msg, "trust_level"):
        msg.trust_level, msg.trust_reason = int(trust.level), str(trust.reason)
    return msg


def mechanism_state_names(msg) -> tuple[list[str], list[str]]:
    """(coordinate_names (n,), independent_names (g,)) of a MechanismState message."""
    with _reading("MechanismState"):
        return (_names(msg.coordinate_names, "coordinate_names"),
                _names(msg.independent_names, "independent_names"))


def _square(flat: np.ndarray, size: int, what: str) -> np.ndarray | None:
    """Row-major (size*size,) -> (size, size); empty -> None."""
    if flat.size == 0:
        return None
    if flat.size != size * size:
        raise ValueError(f"{what} has {flat.size} elements, expected 0 or {size * size}")
    return flat.reshape(size, size)


def snapshot_from_mechanism_state(msg, coordinate_names=None,
                                  independent_names=None) -> MechanismSnapshot:
    """MechanismSnapshot of a MechanismState message (empty optional arrays -> None).

    coordinate_names / independent_names: if given, the message's names must equal them
    (DataError otherwise), so the arrays are known to follow the caller's ordering.
    """
    with _reading("MechanismState"):
        cnames, inames = mechanism_state_names(msg)
        for want, have, what in ((coordinate_names, cnames, "coordinate_names"),
                                 (independent_names, inames, "independent_names")):
            if want is not None and list(want) != have:
                raise DataError(f"MechanismState {what} {have} differ from expected {list(want)}")
        n, g = len(cnames), len(inames)
        arrays = {f: _floats(getattr(msg, f), f, (0, size))
                  for f, size in (("q", n), ("qd", n), ("qdd", n), ("z", g), ("zd", g), ("zdd", g))}
        input_names = _names(msg.input_names, "input_names")
        k = len(input_names)
        forces = _floats(msg.input_forces, "input_forces", (0, k))
        probs = _floats(msg.branch_probabilities, "branch_probabilities")
        branch = msg.branch
        if isinstance(branch, float) or not -(2**31) <= int(branch) < 2**31:
            raise ValueError(f"branch {branch!r} is not an int32")
        return MechanismSnapshot(
            stamp=stamp_to_sec(msg.header.stamp),
            **arrays,
            cov=_square(_floats(msg.covariance, "covariance"), 2 * g, "covariance"),
            branch=int(branch),
            branch_probabilities=probs if probs.size else None,
            input_names=input_names,
            inputs=forces if forces.size else None,
            input_cov=_square(_floats(msg.input_covariance, "input_covariance"), k,
                              "input_covariance"),
        )


# ---------------------------------------------------------------- mbde_msgs/ParticleSet
def particle_set_msg(factory, cloud: ParticleCloud, independent_names, frame_id: str = ""):
    """mbde_msgs/ParticleSet of a cloud: z, zd (N, g) stored row-major; branch (N,) int32;
    weight (N,); independent_names (g,)."""
    names = [str(s) for s in independent_names]
    z = np.asarray(cloud.z, dtype=np.float64)
    n_part = z.shape[0] if z.ndim == 2 else 0
    g = len(names)
    if z.shape != (n_part, g) or np.shape(cloud.zd) != (n_part, g):
        raise ValueError(f"z, zd must be (N, {g}); got {z.shape}, {np.shape(cloud.zd)}")
    msg = factory.new(PARTICLE_SET)
    _header(factory, msg, cloud.stamp, frame_id)
    msg.num_particles, msg.dof, msg.independent_names = int(n_part), int(g), names
    msg.z = factory.array(_flat(z, "z"), "float64")
    msg.zd = factory.array(_flat(cloud.zd, "zd"), "float64")
    branch = np.asarray(cloud.branch).ravel()
    if branch.size != n_part or (branch.size and np.abs(branch).max() >= 2**31):
        raise ValueError(f"branch must be (N,) = ({n_part},) int32 labels")
    msg.branch = factory.array(branch, "int32")
    msg.weight = factory.array(_flat(cloud.weight, "weight", n_part), "float64")
    msg.effective_sample_size = float(cloud.ess)
    msg.unique_particles = int(cloud.unique)
    return msg


def cloud_from_particle_set(msg, independent_names=None) -> ParticleCloud:
    """ParticleCloud of a ParticleSet message; z, zd (N, g), branch (N,) int64, weight (N,).

    independent_names: if given, must equal the message's names (DataError otherwise).
    """
    with _reading("ParticleSet"):
        names = _names(msg.independent_names, "independent_names")
        if independent_names is not None and list(independent_names) != names:
            raise DataError(f"ParticleSet independent_names {names} differ from expected "
                            f"{list(independent_names)}")
        n_part, g = int(msg.num_particles), int(msg.dof)
        if n_part < 0 or g != len(names):
            raise ValueError(f"num_particles {n_part}, dof {g} with {len(names)} names")
        z = _floats(msg.z, "z", (n_part * g,)).reshape(n_part, g)
        zd = _floats(msg.zd, "zd", (n_part * g,)).reshape(n_part, g)
        branch = np.array(msg.branch, dtype=np.int64)
        if branch.shape != (n_part,):
            raise ValueError(f"branch has shape {branch.shape}, expected ({n_part},)")
        ess = float(msg.effective_sample_size)
        unique = msg.unique_particles
        if isinstance(unique, float) or int(unique) < 0:
            raise ValueError(f"unique_particles {unique!r} is not a count")
        return ParticleCloud(stamp=stamp_to_sec(msg.header.stamp), z=z, zd=zd, branch=branch,
                             weight=_floats(msg.weight, "weight", (n_part,)), ess=ess,
                             unique=int(unique))


# ---------------------------------------------------------------- std_msgs/String
def string_msg(factory, text: str):
    """std_msgs/String holding text (e.g. the YAML mechanism description)."""
    msg = factory.new(STRING)
    msg.data = str(text)
    return msg


def string_from_msg(msg) -> str:
    """The text of a std_msgs/String (DataError if it is not a string)."""
    with _reading("String"):
        if not isinstance(msg.data, str):
            raise TypeError(f"data is {type(msg.data).__name__}, not str")
        return msg.data

