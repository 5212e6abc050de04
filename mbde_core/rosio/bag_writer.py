"""BagWriter: write a rosbag2 bag (sqlite3 format 8/9 or mcap) without ROS, via ``rosbags``.

Messages are serialized to CDR with :func:`mbde_core.rosio.typestore.get_typestore`; the
bag stores every topic's message definition (sqlite3 ``message_definitions`` table, mcap
schema records) and its offered QoS profile in the format of the bag's version.
Feature support by ``rosbags`` version: sqlite3 format 8 always, format 9 >= 0.10.4,
mcap >= 0.10.9 (0.10.9 itself drops mcap messages stamped t = 0 when reading: use >= 0.10.10).
"""
from __future__ import annotations

import inspect
import os
from pathlib import Path

from mbde_core.errors import DataError
from mbde_core.rosio.bagerrors import bag_error
from mbde_core.rosio.stamps import sec_to_ns
from mbde_core.rosio.typestore import get_typestore

STORAGES = ("sqlite3", "mcap")
# A file in a bag folder (or any mbde output folder) while it is being written: removed
# when the writer finishes; a bag that still has it was cut short (its writer was
# interrupted or failed) and BagReader refuses it.
INCOMPLETE_MARKER = ".mbde-incomplete"

# name -> (history, depth, reliability, durability); enum values of rmw / rosbag2 v8:
# history 1 keep_last; reliability 1 reliable, 2 best_effort; durability 1 transient_local,
# 2 volatile. Deadline, lifespan, lease: 0 s 0 ns = default (infinite); liveliness 1 automatic.
QOS_PROFILES = {
    "sensor": (1, 5, 2, 2),  # rclcpp SensorDataQoS
    "reliable": (1, 10, 1, 2),  # rclcpp default QoS
    "transient_local": (1, 1, 1, 1),  # latched: descriptions, static data
}


def _qos_profiles(name: str):
    """offered_qos_profiles argument for rosbags' add_connection (list of Qos, or v8 YAML)."""
    if name not in QOS_PROFILES:
        raise ValueError(f"unknown qos {name!r}; expected one of {sorted(QOS_PROFILES)}")
    history, depth, reliability, durability = QOS_PROFILES[name]
    try:
        from rosbags.interfaces import (Qos, QosDurability, QosHistory, QosLiveliness,
                                        QosReliability, QosTime)
    except ImportError:  # rosbags < 0.10.4: preformatted version-8 YAML string
        zero = "{sec: 0, nsec: 0}"
        return (f"- history: {history}\n  depth: {depth}\n  reliability: {reliability}\n"
                f"  durability: {durability}\n  deadline: {zero}\n  lifespan: {zero}\n"
                f"  liveliness: 1\n  liveliness_lease_duration: {zero}\n"
                f"  avoid_ros_namespace_conventions: false")
    zero = QosTime(0, 0)
    return [Qos(QosHistory(history), depth, QosReliability(reliability),
                QosDurability(durability), zero, zero, QosLiveliness(1), zero, False)]


def _open_writer(path: Path, storage: str, version: int):
    """An opened rosbags Writer for the requested storage and format version."""
    from rosbags.rosbag2 import Writer

    params = inspect.signature(Writer.__init__).parameters
    kwargs = {}
    if "version" in params:
        kwargs["version"] = version
    elif version != 8:
        raise DataError(f"{path}: rosbag2 format {version} needs rosbags>=0.10.4")
    if storage == "mcap":
        if "storage_plugin" not in params:
            raise DataError(f"{path}: mcap storage needs rosbags>=0.10.9")
        from rosbags.rosbag2 import StoragePlugin

        kwargs["storage_plugin"] = StoragePlugin.MCAP
    writer = Writer(path, **kwargs)
    writer.open()
    return writer


class BagWriter:
    """Write a rosbag2 bag (a new directory ``path``).

    Use as a context manager: on leaving the block the bag is closed (index and
    metadata.yaml written). When the block raised, the bag keeps the file
    :data:`INCOMPLETE_MARKER` (written when the bag is created): its messages so far stay
    in the storage, but readers refuse it as cut short (``BagReader(...,
    incomplete_ok=True)`` reads it); the block's exception then propagates.

    storage: 'sqlite3' (default, format ``version`` 8 or 9) or 'mcap'.
    """

    def __init__(self, path, storage: str = "sqlite3", *, version: int = 8, typestore=None):
        self.path = Path(path)
        if storage not in STORAGES:
            raise ValueError(f"unknown storage {storage!r}; expected one of {STORAGES}")
        if version not in (8, 9):
            raise ValueError(f"unsupported rosbag2 format version {version}; expected 8 or 9")
        if self.path.exists():
            raise DataError(f"{self.path}: already exists, not overwriting")
        self.storage, self.version = storage, version
        self.typestore = get_typestore() if typestore is None else typestore
        self._topics: dict[str, tuple[object, str]] = {}  # topic -> (connection, typename)
        self.counts: dict[str, int] = {}
        try:
            self._writer = _open_writer(self.path, storage, version)
        except DataError:
            raise
        except Exception as exc:
            raise bag_error(self.path, "cannot create bag", exc) from None
        try:
            (self.path / INCOMPLETE_MARKER).write_text(
                f'{{"tool": "mbde", "writer": "BagWriter", "pid": {os.getpid()}}}\n', encoding="utf-8")
        except OSError as exc:
            raise bag_error(self.path, "cannot create bag", exc) from None

    def add_topic(self, topic: str, typename: str, qos: str = "reliable") -> None:
        """Declare a topic before its first write. qos: 'sensor' | 'reliable' | 'transient_local'."""
        if topic in self._topics:
            raise ValueError(f"topic {topic!r} added twice")
        if typename not in self.typestore.types:
            raise ValueError(f"unknown message type {typename!r}")
        profiles = _qos_profiles(qos)
        try:
            conn = self._writer.add_connection(topic, typename, typestore=self.typestore,
                                               offered_qos_profiles=profiles)
        except Exception as exc:
            raise bag_error(self.path, f"cannot add topic {topic}", exc) from None
        self._topics[topic] = (conn, typename)
        self.counts[topic] = 0

    def write(self, topic: str, t_sec: float, msg) -> None:
        """Serialize msg (a message of the topic's type) to CDR and store it at t_sec [s]."""
        conn, typename = self._conn(topic)
        try:
            data = self.typestore.serialize_cdr(msg, typename)
        except Exception as exc:
            raise bag_error(self.path, f"cannot serialize {typename} for {topic} at t={t_sec}",
                            exc) from None
        self._write(topic, conn, t_sec, data)

    def write_raw(self, topic: str, t_sec: float, data: bytes) -> None:
        """Store already serialized CDR bytes (e.g. from rclpy) at t_sec [s]."""
        conn, _ = self._conn(topic)
        self._write(topic, conn, t_sec, bytes(data))

    def write_raw_ns(self, topic: str, t_ns: int, data: bytes) -> None:
        """Store already serialized CDR bytes at integer time t_ns [ns] (no float rounding)."""
        conn, _ = self._conn(topic)
        if not 0 <= t_ns < 2**63:
            raise DataError(f"{self.path}: time {t_ns} ns on {topic} outside the bag range [0, 2^63) ns")
        try:
            self._writer.write(conn, int(t_ns), data)
        except Exception as exc:
            raise bag_error(self.path, f"cannot write {topic} at t={t_ns} ns", exc) from None
        self.counts[topic] += 1

    def write_raw_many(self, records) -> None:
        """Store a batch of (topic, t_ns, CDR bytes) in order, as write_raw_ns one by one.

        sqlite3 storage without compression: one ``executemany`` for the batch (the rows,
        counts and time range rosbags' Writer.write records; ~3x less time per message);
        otherwise message by message."""
        records = list(records)
        w = self._writer
        cursor = getattr(getattr(w, "storage", None), "cursor", None)
        if (cursor is None or not hasattr(w, "min_timestamp") or getattr(w.compression_mode, "name", "") != "NONE"
                or self.storage != "sqlite3"):
            for topic, t_ns, data in records:
                self.write_raw_ns(topic, t_ns, data)
            return
        rows = []
        for topic, t_ns, data in records:
            conn, _ = self._conn(topic)
            if not 0 <= t_ns < 2**63:
                raise DataError(f"{self.path}: time {t_ns} ns on {topic} outside the bag range [0, 2^63) ns")
            rows.append((conn.id, int(t_ns), data))
            self.counts[topic] += 1
            w.counts[conn.id] += 1
        if not rows:
            return
        try:
            cursor.executemany("INSERT INTO messages (topic_id, timestamp, data) VALUES(?, ?, ?)", rows)
        except Exception as exc:
            raise bag_error(self.path, "cannot write messages", exc) from None
        times = [r[1] for r in rows]
        w.min_timestamp = min(min(times), w.min_timestamp)
        w.max_timestamp = max(max(times), w.max_timestamp)

    def close(self, complete: bool = True) -> None:
        """Finish the bag (idempotent). Raises DataError if it cannot be completed.
        complete False: write its index and metadata but keep it marked incomplete."""
        writer, self._writer = self._writer, None
        if writer is None:
            return
        try:
            writer.close()
        except Exception as exc:
            raise bag_error(self.path, "cannot finish bag", exc) from None
        if complete:
            try:
                (self.path / INCOMPLETE_MARKER).unlink()
            except FileNotFoundError:
                pass

    def __enter__(self) -> "BagWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            self.close()
            return False
        try:  # keep what was written, marked incomplete; the block's own exception is the one to report
            self.close(complete=False)
        except DataError:
            pass
        return False

    def _conn(self, topic: str):
        if self._writer is None:
            raise DataError(f"{self.path}: bag already closed")
        if topic not in self._topics:
            raise ValueError(f"topic {topic!r} was not added (add_topic first)")
        return self._topics[topic]

    def _write(self, topic: str, conn, t_sec: float, data: bytes) -> None:
        try:
            ns = sec_to_ns(t_sec)
        except DataError as exc:
            raise DataError(f"{self.path}: {topic}: {exc}") from None
        if not 0 <= ns < 2**63:
            raise DataError(f"{self.path}: time {t_sec!r} s on {topic} outside the bag range "
                            "[0, 2^63) ns")
        try:
            self._writer.write(conn, ns, data)
        except Exception as exc:
            raise bag_error(self.path, f"cannot write {topic} at t={t_sec}", exc) from None
        self.counts[topic] += 1
