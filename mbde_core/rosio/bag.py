"""rosbag2 bags without ROS: :class:`BagWriter`, :class:`BagReader`, :func:`bag_info`.

This module gathers the bag API; the classes live in :mod:`mbde_core.rosio.bag_writer`
and :mod:`mbde_core.rosio.bag_reader`. Built on ``rosbags`` (sqlite3 format 8 with any
version >= 0.9.23; format 9 needs >= 0.10.4; mcap needs >= 0.10.10). Messages are
(de)serialized to CDR with :func:`mbde_core.rosio.typestore.get_typestore`, so
``mbde_msgs`` types always decode with this checkout's definitions.

- Writing: sqlite3 storage with rosbag2 format version 8 by default (readable by ROS 2
  Humble and newer), or mcap storage (the message definitions are embedded in the mcap
  schema records, so generic mcap tools decode every topic).
- Times: ``t_sec`` float seconds on the bag clock <-> int64 nanoseconds, ns-exact
  (:mod:`mbde_core.rosio.stamps`).
- Errors: a missing, incomplete or corrupt bag raises :class:`DataError` with one line
  naming the path and the problem. Messages that do not decode are skipped and counted
  (``BagReader.skipped``) unless ``strict=True``.
- rclpy/Fast DDS can append more trailing bytes than ``rosbags`` accepts (CDR size
  mismatch, e.g. JointState with an empty ``effort``): decoding accepts up to
  :data:`MAX_TRAILING_PADDING` surplus bytes after the message.
"""
from __future__ import annotations

from pathlib import Path

from mbde_core.rosio.bag_reader import MAX_TRAILING_PADDING, BagReader, deserialize
from mbde_core.rosio.bag_writer import QOS_PROFILES, STORAGES, BagWriter
from mbde_core.rosio.bagerrors import bag_error
from mbde_core.rosio.stamps import ns_to_sec

__all__ = ["BagReader", "BagWriter", "bag_info", "deserialize", "MAX_TRAILING_PADDING",
           "QOS_PROFILES", "STORAGES"]


def _read_metadata(path: Path) -> dict:
    import yaml

    try:
        doc = yaml.safe_load((path / "metadata.yaml").read_text(encoding="utf-8"))
        return dict(doc["rosbag2_bagfile_information"])
    except Exception as exc:
        raise bag_error(path, "unreadable metadata.yaml", exc) from None


def bag_info(path) -> dict:
    """Summary of a bag (reads every message's time stamp, not its payload).

    Returns {'path', 'storage', 'version', 'message_count', 'start', 'end', 'duration'
    (s, None/0 for an empty bag), 'topics': [{'topic', 'type', 'count', 'rate_hz'}]};
    rate_hz = (count - 1) / (last - first stamp) of that topic, None if undefined.
    """
    with BagReader(path) as reader:
        meta = _read_metadata(reader.path)
        first: dict[str, int] = {}
        last: dict[str, int] = {}
        for topic, t_ns, _, _ in reader.raw_messages():
            first.setdefault(topic, t_ns)
            last[topic] = t_ns
        topics = []
        for topic, typ, count in reader.topics():
            span = last.get(topic, 0) - first.get(topic, 0)
            rate = (count - 1) / ns_to_sec(span) if count > 1 and span > 0 else None
            topics.append({"topic": topic, "type": typ, "count": count, "rate_hz": rate})
        return {
            "path": str(reader.path),
            "storage": meta.get("storage_identifier"),
            "version": meta.get("version"),
            "message_count": reader.message_count,
            "start": reader.start,
            "end": reader.end,
            "duration": reader.duration,
            "topics": topics,
        }
