"""BagReader: read a rosbag2 bag (sqlite3 or mcap) without ROS, via ``rosbags``.

Messages decode with :func:`mbde_core.rosio.typestore.get_typestore` (this checkout's
``mbde_msgs`` definitions, whatever the bag embeds); types unknown to it decode from the
bag's own definitions. rclpy/Fast DDS can append up to a few alignment bytes more than
``rosbags`` accepts ("CDR message size mismatch", e.g. JointState with an empty
``effort``): :func:`deserialize` accepts up to :data:`MAX_TRAILING_PADDING` surplus
bytes after the message. A ``mbde_msgs/MechanismState`` recorded before it had
``trust_level`` and ``trust_reason`` (the bag's own definition lacks them) is read with
those two fields appended at their defaults (OK, no reason): :func:`with_trust_fields`.
"""
from __future__ import annotations

from pathlib import Path

from mbde_core.errors import DataError
from mbde_core.rosio.bag_writer import INCOMPLETE_MARKER
from mbde_core.rosio.bagerrors import bag_error, one_line
from mbde_core.rosio.stamps import ns_to_sec
from mbde_core.rosio.typestore import build_typestore, get_typestore

MAX_TRAILING_PADDING = 256  # surplus bytes accepted after a CDR message's last field
MECHANISM_STATE = "mbde_msgs/msg/MechanismState"


def with_trust_fields(data) -> bytes:
    """CDR bytes of a MechanismState without the trailing ``uint8 trust_level`` and
    ``string trust_reason`` (an older definition) with both appended: 0, then the
    string's uint32 length 1 (aligned to 4 from the byte after the 4-byte encapsulation
    header) and its NUL."""
    body = len(data) - 4 + 1
    return bytes(data) + b"\x00" + b"\x00" * (-body % 4) + b"\x01\x00\x00\x00\x00"


def _without_trust(conn) -> bool:
    """A MechanismState connection whose definition in the bag predates the trust fields."""
    if conn.msgtype != MECHANISM_STATE:
        return False
    text = getattr(conn.msgdef, "data", conn.msgdef) or ""
    return bool(text) and "trust_level" not in text

# rosbags parses metadata.yaml and every topic's QoS profiles (YAML texts in it) with
# ruamel.yaml's pure-Python loader on every open (~0.1-0.3 s for a bag of 8 topics): a
# replay opens a bag in the parent, then again in every worker (forked: they inherit this
# cache) and in the merger. The parsed document of each
# metadata text is kept here (a bag rewritten in between has another text).
_METADATA: dict[str, object] = {}


class _CachingYAML:
    """Stand-in for ``ruamel.yaml.YAML`` inside rosbags' reader and metadata modules:
    ``load(text)`` gives the same document, parsed once per text (each load returns a
    fresh deep copy); everything else (``dump``, options) is a real YAML object's."""

    def __init__(self, *args, **kw):
        self._args, self._kw = args, kw
        self._real = None

    def __getattr__(self, name):  # dump and the rest: a real ruamel YAML object
        if name.startswith("__") or name in ("_args", "_kw", "_real"):
            raise AttributeError(name)
        if self._real is None:
            from ruamel.yaml import YAML

            self._real = YAML(*self._args, **self._kw)
        return getattr(self._real, name)

    def load(self, text):
        import copy

        if isinstance(text, str) and text in _METADATA:
            return copy.deepcopy(_METADATA[text])
        from ruamel.yaml import YAML

        out = YAML(*self._args, **self._kw).load(text)
        if isinstance(text, str):
            _METADATA[text] = copy.deepcopy(out)
        return out


def _cache_metadata_parse() -> None:
    """Route rosbags' metadata parses (metadata.yaml, then each topic's QoS profiles, a
    YAML text of their own) through :class:`_CachingYAML`."""
    import rosbags.rosbag2.metadata as metadata
    import rosbags.rosbag2.reader as reader

    for mod in (reader, metadata):
        if getattr(mod, "YAML", None) is not None and mod.YAML is not _CachingYAML:
            mod.YAML = _CachingYAML


def deserialize(typestore, data, typename: str):
    """CDR bytes -> message, tolerating up to MAX_TRAILING_PADDING surplus trailing bytes.

    rosbags refuses more than 3 bytes after the last field; rclpy/Fast DDS buffers carry
    the serializer's size estimate instead (measured: +4 B for a JointState with empty
    effort, +8 B with empty velocity and effort, +24 B for a MechanismState with every
    optional array empty), and those bytes are not zero. Raises DataError (one line) if
    the bytes do not decode as typename.
    """
    try:
        return typestore.deserialize_cdr(data, typename)
    except Exception as exc:  # rosbags: SerdeError, AssertionError (<0.11), struct.error, ...
        first = exc
    data = bytes(data)
    msg = _decode_prefix(typestore, data, typename)
    if msg is not None:
        return msg
    raise DataError(one_line(f"cannot decode {typename} ({len(data)} bytes): "
                             f"{type(first).__name__}: {first}"))


def _decode_prefix(typestore, data: bytes, typename: str):
    """The message encoded at the start of data if at most MAX_TRAILING_PADDING bytes
    follow it, else None."""
    if len(data) < 4 or data[:2] not in (b"\x00\x00", b"\x00\x01"):
        return None
    try:  # rosbags' generated decoder reports where the message ends (0.9.23 .. 0.11)
        msgdef = typestore.get_msgdef(typename)
        decode = msgdef.deserialize_cdr_le if data[1] else msgdef.deserialize_cdr_be
        msg, end = decode(memoryview(data)[4:], 0, msgdef.cls, typestore)
    except Exception:
        msg, end = None, None
    if msg is not None and isinstance(end, int):
        return msg if 0 <= len(data) - 4 - end <= MAX_TRAILING_PADDING else None
    # decoder internals unavailable: rosbags accepts <= 3 surplus bytes, so cutting
    # 4, 8, 12, ... bytes meets every surplus up to MAX_TRAILING_PADDING
    for cut in range(4, MAX_TRAILING_PADDING + 4, 4):
        if len(data) - cut < 4:
            break
        try:
            return typestore.deserialize_cdr(data[:-cut], typename)
        except Exception:
            continue
    return None


class BagReader:
    """Read a rosbag2 bag (directory with metadata.yaml; sqlite3 or mcap storage).

    Opens on construction (DataError if missing/incomplete/corrupt, or marked cut short
    by its writer, see :data:`~mbde_core.rosio.bag_writer.INCOMPLETE_MARKER`, unless
    ``incomplete_ok``); use as a context manager or call close(). ``skipped``: topic -> number of undecodable messages skipped;
    ``skip_reasons``: topic -> first reason.
    """

    def __init__(self, path, typestore=None, *, incomplete_ok: bool = False):
        self.path = Path(path)
        if not self.path.exists():
            raise DataError(f"{self.path}: no such bag")
        if not incomplete_ok and (self.path / INCOMPLETE_MARKER).exists():
            raise DataError(f"{self.path}: incomplete bag: its writer was interrupted or failed before finishing it "
                            "(simulate or record it again)")
        if self.path.is_dir() and not (self.path / "metadata.yaml").is_file():
            raise DataError(f"{self.path}: not a rosbag2 bag (no metadata.yaml)")
        if not self.path.is_dir():
            raise DataError(f"{self.path}: not a rosbag2 bag directory")
        self.typestore = get_typestore() if typestore is None else typestore
        self._foreign = None  # private typestore for types defined only inside the bag
        self.skipped: dict[str, int] = {}
        self.skip_reasons: dict[str, str] = {}
        from rosbags.rosbag2 import Reader

        _cache_metadata_parse()
        try:
            self._reader = Reader(self.path)
            self._reader.open()
        except Exception as exc:
            raise bag_error(self.path, "cannot open bag", exc) from None
        self._conns = list(self._reader.connections)

    # -- metadata
    def topics(self) -> list[tuple[str, str, int]]:
        """[(topic, type, message count)] in the order stored in the bag."""
        counts: dict[tuple[str, str], int] = {}
        for c in self._conns:
            counts[(c.topic, c.msgtype)] = counts.get((c.topic, c.msgtype), 0) + c.msgcount
        return [(topic, typ, n) for (topic, typ), n in counts.items()]

    @property
    def message_count(self) -> int:
        """Total number of messages."""
        return int(self._reader.message_count)

    @property
    def start(self) -> float | None:
        """Bag time of the first message [s]; None for an empty bag."""
        return ns_to_sec(self._reader.start_time) if self.message_count else None

    @property
    def end(self) -> float | None:
        """Bag time of the last message [s]; None for an empty bag."""
        return ns_to_sec(self._reader.end_time - 1) if self.message_count else None

    @property
    def duration(self) -> float:
        """end - start [s] (0 for an empty or one-message bag)."""
        return ns_to_sec(self._reader.end_time - 1 - self._reader.start_time) \
            if self.message_count else 0.0

    # -- messages
    def raw_messages(self, topics=None):
        """Yield (topic, t_ns, typename, data bytes) in bag-time order, undecoded.

        After the last message, a topic yielding fewer/more messages than the bag lists
        raises DataError (storages written without checksums can lose records silently).
        """
        conns = self._select(topics)
        if not conns:
            return
        listed: dict[tuple[str, str], int] = {}
        for c in conns:
            listed[(c.topic, c.msgtype)] = listed.get((c.topic, c.msgtype), 0) + c.msgcount
        seen = dict.fromkeys(listed, 0)
        old = {c.id for c in conns if _without_trust(c)}
        try:
            for conn, t_ns, data in self._reader.messages(connections=conns):
                seen[(conn.topic, conn.msgtype)] += 1
                yield conn.topic, t_ns, conn.msgtype, with_trust_fields(data) if conn.id in old else data
        except DataError:
            raise
        except Exception as exc:
            raise bag_error(self.path, "corrupt bag", exc) from None
        for key, count in listed.items():  # no checksums: records can vanish silently
            if seen[key] != count:
                raise DataError(f"{self.path}: corrupt bag: {seen[key]} readable "
                                f"messages on {key[0]}, the bag lists {count}")

    def messages(self, topics=None, *, strict: bool = False):
        """Yield (topic, t_sec, msg) in bag-time order, decoded with the mbde typestore.

        topics: iterable of topic names (None = all); a name not in the bag raises
        DataError. Undecodable messages are counted in ``skipped`` and skipped, or raise
        DataError if strict.
        """
        for topic, t_ns, typename, data in self.raw_messages(topics):
            try:
                msg = deserialize(self._store_for(typename), data, typename)
            except DataError as exc:
                if strict:
                    raise DataError(f"{self.path}: {topic} at t={ns_to_sec(t_ns)}: {exc}") from None
                self.skipped[topic] = self.skipped.get(topic, 0) + 1
                self.skip_reasons.setdefault(topic, str(exc))
                continue
            yield topic, ns_to_sec(t_ns), msg

    def close(self) -> None:
        """Release the bag files (idempotent)."""
        reader, self._reader = self._reader, None
        if reader is not None:
            try:
                reader.close()
            except Exception:
                pass

    def __enter__(self) -> "BagReader":
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False

    def _select(self, topics):
        if topics is None:
            return self._conns
        wanted = {topics} if isinstance(topics, str) else set(topics)
        missing = wanted - {c.topic for c in self._conns}
        if missing:
            raise DataError(f"{self.path}: no topic(s) {sorted(missing)} in bag "
                            f"(has {sorted({c.topic for c in self._conns})})")
        return [c for c in self._conns if c.topic in wanted]

    def _store_for(self, typename: str):
        """The typestore decoding typename; foreign types come from the bag's definitions
        and go into a private store (the shared one is never modified)."""
        if typename in self.typestore.types:
            return self.typestore
        if self._foreign is not None and typename in self._foreign.types:
            return self._foreign
        conn = next(c for c in self._conns if c.msgtype == typename)
        text = getattr(conn.msgdef, "data", conn.msgdef) or ""
        if not text:
            raise DataError(f"unknown message type {typename} and the bag has no definition")
        from rosbags.typesys import get_types_from_idl, get_types_from_msg

        if self._foreign is None:
            self._foreign = build_typestore()
        try:
            if text.startswith("=" * 80 + "\nIDL: "):
                self._foreign.register(get_types_from_idl(text))
            else:
                self._foreign.register(get_types_from_msg(text, typename))
        except Exception as exc:
            raise DataError(one_line(f"cannot use the bag's definition of {typename}: {exc}"))
        if typename not in self._foreign.types:
            raise DataError(f"the bag's definition does not define {typename}")
        return self._foreign
