"""Coordinate frames of a mechanism and its sensors, for tf2 (REP 103 / REP 105), ROS-free.

One frame per body, computed from the natural coordinates q: origin at the body's first
point, x axis towards its second point (the body frame of the mechanism YAML, in which
``cog``, sensor ``offset`` and ``axes`` are given), z out of the mechanism plane. Its
parent is the fixed frame (``world``, the scenario's ``frame_id``: REP 105's world/map
level). A body whose basis points are both fixed (a ground link) is static.

Sensor frames (the readings' ``header.frame_id``) hang below the frame they are fixed to:

- gyroscope, encoder: the body frame itself (identity), the measured body;
- IMU: the body frame, at ``offset`` [m], rotated by ``axis_angle`` [rad];
- body accelerometer: at ``offset``, x along its first axis (``axes[0]``);
- point or slider accelerometer: at the moving point with world-fixed axes (x along the
  first axis), so a *moving* frame below ``world``, not a static one;
- slider position sensor: at the slider track's origin, x along the track (static);
- point position sensor: at its point with world axes (moving).

A frame is a planar rigid transform (x, y, yaw); :attr:`FrameTransform.quaternion` is
the rotation about z as a unit quaternion, in ROS's (x, y, z, w) order.
Every name gets ``prefix`` (e.g. ``ukf/`` for an estimate, '' for the ground truth or a
robot's own tree); the fixed frame does not.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class FrameTransform:
    """The pose of ``child`` in ``parent``: translation (x, y) [m], rotation yaw [rad] about z."""

    parent: str
    child: str
    x: float
    y: float
    yaw: float

    @property
    def quaternion(self) -> tuple[float, float, float, float]:
        """(x, y, z, w) of the rotation yaw about z (geometry_msgs/Quaternion order)."""
        return yaw_quaternion(self.yaw)


def yaw_quaternion(yaw: float) -> tuple[float, float, float, float]:
    """(x, y, z, w) = (0, 0, sin(yaw/2), cos(yaw/2)), the rotation yaw [rad] about z,
    computed as the 'sxyz' Euler product with roll = pitch = 0 (the signed zeros of
    transforms3d's and scipy's ``from_euler``; test/test_frames.py checks it against
    scipy's :class:`~scipy.spatial.transform.Rotation`)."""
    ck, sk = math.cos(yaw / 2.0), math.sin(yaw / 2.0)  # ci = cj = cos(0) = 1, si = sj = 0
    cc, cs, sc, ss = 1.0 * ck, 1.0 * sk, 0.0 * ck, 0.0 * sk
    return 1.0 * sc - 0.0 * cs, 1.0 * ss + 0.0 * cc, 1.0 * cs - 0.0 * sc, 1.0 * cc + 0.0 * ss


class MechanismFrames:
    """The frame tree of a mechanism (and optionally its sensors) under one prefix.

    mech: Mechanism; sensors: iterable of mbde sensors (their ``frame_id`` and mount);
    world: the fixed frame; prefix: prepended to every body and sensor frame.
    """

    def __init__(self, mech, sensors=(), *, world: str = "world", prefix: str = ""):
        self.mech = mech
        self.world = world
        self.prefix = prefix
        fixed = [p.fixed for p in mech.spec.points]
        self.bodies = []  # (body index, frame name, i, j) of moving bodies
        self._static = []
        for b, (i, j, _) in enumerate(mech.body_basis):
            name = self.body_frame(b)
            if fixed[i] and fixed[j]:
                x, y, yaw = _pose(mech.fixed_xy[i], mech.fixed_xy[j])
                self._static.append(FrameTransform(world, name, x, y, yaw))
            else:
                self.bodies.append((b, name, i, j))
        self._moving_sensors = []  # (frame, point index, yaw): point-mounted, world-fixed axes
        seen = set()
        for s in sensors:
            frame = prefix + s.frame_id
            if frame in seen or frame == world or frame in {n for _, n, _, _ in self.bodies}:
                continue  # one mount per frame id (e.g. two sensors of one IMU chip)
            seen.add(frame)
            mount = self._mount(s, frame)
            if mount is not None:
                self._static.append(mount)

    def body_frame(self, body: int) -> str:
        return self.prefix + self.mech.body_names[body]

    @property
    def frame_names(self) -> list[str]:
        """Every frame this tree publishes (moving first, then static)."""
        return ([n for _, n, _, _ in self.bodies] + [f for f, _, _ in self._moving_sensors]
                + [t.child for t in self._static])

    def _mount(self, s, frame: str) -> FrameTransform | None:
        kind = s.kind
        if kind in ("gyroscope", "encoder"):
            return FrameTransform(self.body_frame(s.body), frame, 0.0, 0.0, 0.0)
        if kind == "imu":
            return FrameTransform(self.body_frame(s.body), frame, s.offset[0], s.offset[1], s.axis_angle)
        if kind == "accelerometer":
            if s.body >= 0:
                return FrameTransform(self.body_frame(s.body), frame, s.offset[0], s.offset[1], s.axes[0])
            self._moving_sensors.append((frame, s.point, s.axes[0]))
            return None
        if kind == "point_position":  # a tracked point (camera, marker): world axes, at the point
            self._moving_sensors.append((frame, s.point, 0.0))
            return None
        if kind == "slider_position":
            return FrameTransform(self.world, frame, float(s.origin[0]), float(s.origin[1]),
                                  math.atan2(s.u[1], s.u[0]))
        return None

    def moving(self, q) -> list[FrameTransform]:
        """Transforms of the moving frames at q (n,): world -> each moving body, world ->
        each point-mounted sensor."""
        P = self.mech.points(np.asarray(q, dtype=float))
        out = [FrameTransform(self.world, name, *_pose(P[i], P[j])) for _, name, i, j in self.bodies]
        for frame, k, yaw in self._moving_sensors:
            out.append(FrameTransform(self.world, frame, float(P[k, 0]), float(P[k, 1]), yaw))
        return out

    def moving_poses(self, Q) -> list[tuple[list, list, list]]:
        """Per moving frame (order of :meth:`moving`), the lists (x, y, yaw) over a batch of
        configurations Q (N, n): the values :meth:`moving` gives one configuration at a time."""
        P = self.mech.points(np.asarray(Q, dtype=float).reshape(-1, self.mech.n))
        out = []
        for _, _, i, j in self.bodies:
            d = (P[:, j] - P[:, i]).tolist()
            out.append((P[:, i, 0].tolist(), P[:, i, 1].tolist(), [math.atan2(dy, dx) for dx, dy in d]))
        for _, k, yaw in self._moving_sensors:
            out.append((P[:, k, 0].tolist(), P[:, k, 1].tolist(), [yaw] * len(P)))
        return out

    def static(self) -> list[FrameTransform]:
        """Transforms that never change: ground bodies, sensor mounts on bodies, slider tracks."""
        return list(self._static)


def _pose(pi, pj) -> tuple[float, float, float]:
    """(x, y, yaw) of a body frame with origin pi and x axis towards pj."""
    return float(pi[0]), float(pi[1]), math.atan2(float(pj[1] - pi[1]), float(pj[0] - pi[0]))
