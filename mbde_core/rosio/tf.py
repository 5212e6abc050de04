"""tf2_msgs/TFMessage for ``/tf`` and ``/tf_static`` (ROS-free, any message factory).

Builds the messages of a list of :class:`mbde_core.viz.frames.FrameTransform` (one
``geometry_msgs/TransformStamped`` each, z = 0, rotation about z) and reads them back
(tests, tools). Topic and QoS conventions of tf2: ``/tf`` volatile, ``/tf_static``
reliable + transient local (latched), every static transform of a publisher in one
message.
"""
from __future__ import annotations

TF_MESSAGE = "tf2_msgs/msg/TFMessage"
TRANSFORM_STAMPED = "geometry_msgs/msg/TransformStamped"
TF_TOPIC = "/tf"
TF_STATIC_TOPIC = "/tf_static"


def tf_message(factory, transforms, stamp):
    """TFMessage of ``transforms`` stamped ``stamp``: t [s] (float) or a ready
    builtin_interfaces/Time (exact integer-nanosecond stamps)."""
    header_stamp = factory.time(stamp) if isinstance(stamp, (int, float)) else stamp
    msg = factory.new(TF_MESSAGE)
    out = []
    for tr in transforms:
        ts = factory.new(TRANSFORM_STAMPED)
        ts.header.stamp = header_stamp
        ts.header.frame_id = tr.parent
        ts.child_frame_id = tr.child
        ts.transform.translation.x = float(tr.x)
        ts.transform.translation.y = float(tr.y)
        ts.transform.translation.z = 0.0
        qx, qy, qz, qw = tr.quaternion
        rot = ts.transform.rotation
        rot.x, rot.y, rot.z, rot.w = qx, qy, qz, qw
        out.append(ts)
    msg.transforms = out
    return msg


def transforms_from_message(msg) -> list[dict]:
    """[{'parent', 'child', 'stamp' (s), 'x', 'y', 'z', 'yaw', 'quaternion' (x, y, z, w)}]
    of a TFMessage (rclpy or rosbags)."""
    import math

    out = []
    for ts in msg.transforms:
        r, t = ts.transform.rotation, ts.transform.translation
        out.append({
            "parent": ts.header.frame_id, "child": ts.child_frame_id,
            "stamp": ts.header.stamp.sec + 1e-9 * ts.header.stamp.nanosec,
            "x": t.x, "y": t.y, "z": t.z, "quaternion": (r.x, r.y, r.z, r.w),
            "yaw": 2.0 * math.atan2(r.z, r.w),
        })
    return out
