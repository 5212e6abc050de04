"""The shapes of :mod:`mbde_core.viz.markers` as ``visualization_msgs`` messages for RViz:
one Marker per shape (LINE_LIST, SPHERE_LIST or TEXT_VIEW_FACING, ADD), as message objects
of a message factory (:func:`marker_array`), as plain values or CDR bytes written without
message objects (:func:`marker_array_cdr`), and read back from a recorded MarkerArray
(:func:`shapes_from_marker_array`).
"""
from __future__ import annotations

import numpy as np

from mbde_core.rosio.stamps import sec_to_stamp
from mbde_core.viz.markers import Shape

MARKER = "visualization_msgs/msg/Marker"
MARKER_ARRAY = "visualization_msgs/msg/MarkerArray"
_TYPES = {"lines": 5, "points": 7, "text": 9}  # LINE_LIST, SPHERE_LIST, TEXT_VIEW_FACING
ADD, DELETE = 0, 2


def _point(factory, x, y, z):
    p = factory.new("geometry_msgs/msg/Point")
    p.x, p.y, p.z = float(x), float(y), float(z)
    return p


def _rgba(factory, c):
    col = factory.new("std_msgs/msg/ColorRGBA")
    col.r, col.g, col.b, col.a = (float(v) for v in c)
    return col


def marker(factory, shape: Shape, frame_id: str, stamp: float):
    """visualization_msgs/Marker of a shape; an empty shape gives a DELETE of its id."""
    m = factory.new(MARKER)
    m.header.stamp = factory.time(stamp)
    m.header.frame_id = str(frame_id)
    m.ns, m.id = shape.ns, int(shape.id)
    m.pose.orientation.w = 1.0  # identity (RViz rejects an all-zero quaternion)
    if shape.empty:
        m.action = DELETE
        return m
    m.action = ADD
    m.type = _TYPES[shape.kind]
    m.color = _rgba(factory, shape.color)
    s = float(shape.size)
    if shape.kind == "text":
        m.pose.position.x, m.pose.position.y, m.pose.position.z = float(shape.xy[0, 0]), float(shape.xy[0, 1]), shape.z
        m.scale.z = s
        m.text = shape.text
        return m
    m.scale.x = s
    if shape.kind == "points":
        m.scale.y = m.scale.z = s
    m.points = [_point(factory, x, y, shape.z) for x, y in np.asarray(shape.xy, float)]
    if shape.colors is not None:
        m.colors = [_rgba(factory, c) for c in np.asarray(shape.colors, float)]
    return m


def marker_array(factory, shapes, frame_id: str, stamp: float):
    """visualization_msgs/MarkerArray of shapes (in order)."""
    arr = factory.new(MARKER_ARRAY)
    arr.markers = [marker(factory, s, frame_id, stamp) for s in shapes]
    return arr


def marker_values(shape: Shape, frame_id: str, sec: int, nanosec: int) -> dict:
    """The fields of :func:`marker`'s message as plain values (for
    :class:`mbde_core.rosio.cdr_writer.CdrWriter`): the same message, no objects built."""
    m = {"header": {"stamp": {"sec": sec, "nanosec": nanosec}, "frame_id": str(frame_id)},
         "ns": shape.ns, "id": int(shape.id), "pose": {"orientation": {"w": 1.0}}}
    if shape.empty:
        m["action"] = DELETE
        return m
    m["action"] = ADD
    m["type"] = _TYPES[shape.kind]
    m["color"] = dict(zip("rgba", (float(v) for v in shape.color)))
    s = float(shape.size)
    if shape.kind == "text":
        m["pose"]["position"] = {"x": float(shape.xy[0, 0]), "y": float(shape.xy[0, 1]), "z": float(shape.z)}
        m["scale"] = {"z": s}
        m["text"] = shape.text
        return m
    m["scale"] = {"x": s, "y": s, "z": s} if shape.kind == "points" else {"x": s}
    xy = np.asarray(shape.xy, float).reshape(-1, 2)
    m["points"] = np.column_stack([xy, np.full(len(xy), float(shape.z))])
    if shape.colors is not None:
        m["colors"] = np.asarray(shape.colors, float).reshape(-1, 4)
    return m


def marker_array_cdr(writer, shapes, frame_id: str, stamp: float) -> bytes:
    """CDR bytes of :func:`marker_array` (identical), written by a
    :class:`~mbde_core.rosio.cdr_writer.CdrWriter` without building message objects."""
    sec, nanosec = sec_to_stamp(stamp)
    return writer.serialize(MARKER_ARRAY, {"markers": [marker_values(s, frame_id, sec, nanosec) for s in shapes]})


def shapes_from_marker_array(msg) -> list[Shape]:
    """Shapes of a MarkerArray built by :func:`marker_array` (ADD markers only).

    Lets ``mbde render`` and the tests read back markers recorded in a bag."""
    inv = {v: k for k, v in _TYPES.items()}
    out = []
    for m in msg.markers:
        if int(m.action) != ADD or int(m.type) not in inv:
            continue
        kind = inv[int(m.type)]
        c = (m.color.r, m.color.g, m.color.b, m.color.a)
        if kind == "text":
            out.append(Shape(kind, m.ns, int(m.id), np.array([[m.pose.position.x, m.pose.position.y]]), c,
                             float(m.scale.z), text=m.text, z=float(m.pose.position.z)))
            continue
        xy = np.array([[p.x, p.y] for p in m.points], dtype=float).reshape(-1, 2)
        cols = np.array([[k.r, k.g, k.b, k.a] for k in m.colors], dtype=float).reshape(-1, 4) if len(m.colors) else None
        zz = float(m.points[0].z) if len(m.points) else 0.0
        out.append(Shape(kind, m.ns, int(m.id), xy, c, float(m.scale.x), colors=cols, z=zz))
    return out
