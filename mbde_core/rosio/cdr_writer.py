"""A small CDR encoder for messages given as plain values: dicts, numbers, numpy arrays.

Building a message object field by field (rosbags' classes, or rclpy's) and serialising
it costs tens of microseconds per nested message; a MarkerArray of a four-bar with its
points is ~3 ms. :class:`CdrWriter` writes the same bytes straight from values:

- a message is a ``dict`` {field: value}; fields left out take their defaults (0, "",
  empty sequences, nested messages of defaults);
- a sequence of messages whose fields are all numbers of one type (geometry_msgs/Point:
  3 float64, std_msgs/ColorRGBA: 4 float32, ...) may be given as an (N, k) array and is
  written as one block; other sequences are lists of dicts;
- sequences and arrays of numbers are numpy arrays or lists; strings are ``str``.

Encoding follows the ROS 2 CDR rules (little endian, encapsulation header 00 01 00 00,
every primitive aligned to its size relative to the byte after the header, a string or
sequence length as uint32 aligned to 4, strings NUL-terminated), as rosbags'
``serialize_cdr`` does: the bytes are identical (test/test_cdr_writer.py).
"""
from __future__ import annotations

import struct

import numpy as np

from mbde_core.rosio.typestore import fielddefs

_PRIM = {"bool": ("<?", 1), "byte": ("<B", 1), "char": ("<B", 1), "int8": ("<b", 1), "uint8": ("<B", 1),
         "int16": ("<h", 2), "uint16": ("<H", 2), "int32": ("<i", 4), "uint32": ("<I", 4),
         "int64": ("<q", 8), "uint64": ("<Q", 8), "float32": ("<f", 4), "float64": ("<d", 8)}
_HEADER = b"\x00\x01\x00\x00"


def _kind(node) -> int:
    return int(node.value if hasattr(node, "value") else node)


def _base(desc) -> str:
    return desc[0] if isinstance(desc, tuple) else desc


class CdrWriter:
    """CDR bytes of messages of a typestore given as plain values (module doc)."""

    def __init__(self, store):
        self._defs = fielddefs(store)
        self._flat: dict[str, tuple[str, int, int] | None] = {}
        self._plans: dict[str, list] = {}

    def serialize(self, typename: str, value: dict) -> bytes:
        buf = bytearray(_HEADER)
        self._message(buf, typename, value or {})
        return bytes(buf)

    # -- helpers
    def flat_block(self, typename: str):
        """(numpy dtype, field count, alignment) if every field of ``typename`` is a number
        of one type (a Point, a ColorRGBA), else None."""
        if typename not in self._flat:
            fields = self._defs[typename][1]
            bases = {(_kind(k), _base(d) if _kind(k) == 1 else None) for _, (k, d) in fields}
            if len(bases) == 1:
                kind, base = next(iter(bases))
                if kind == 1 and base in _PRIM and base != "bool":
                    fmt, size = _PRIM[base]
                    self._flat[typename] = (np.dtype(fmt), len(fields), size)
                    return self._flat[typename]
            self._flat[typename] = None
        return self._flat[typename]

    @staticmethod
    def _align(buf: bytearray, size: int) -> None:
        pad = -(len(buf) - 4) % size
        if pad:
            buf += b"\x00" * pad

    def _string(self, buf: bytearray, text) -> None:
        data = str(text or "").encode("utf-8") + b"\x00"
        self._align(buf, 4)
        buf += struct.pack("<I", len(data))
        buf += data

    def _plan(self, typename: str) -> list:
        """The fields of ``typename`` as (name, kind, type or base, sequence, count, element
        is a message), their node kinds resolved once per type."""
        plan = self._plans.get(typename)
        if plan is None:
            plan = []
            for name, (kind, desc) in self._defs[typename][1]:
                kind = _kind(kind)
                if kind == 2:
                    plan.append((name, 2, desc, False, 0, True))
                elif kind == 1:
                    plan.append((name, 1, _base(desc), False, 0, False))
                else:
                    (sub_kind, sub), count = desc
                    is_msg = _kind(sub_kind) == 2
                    plan.append((name, kind, sub if is_msg else _base(sub), kind == 4, count, is_msg))
            self._plans[typename] = plan
        return plan

    def _message(self, buf: bytearray, typename: str, value: dict) -> None:
        for name, kind, desc, sequence, count, is_msg in self._plan(typename):
            v = value.get(name) if value else None
            if kind == 2:
                self._message(buf, desc, v or {})
            elif kind == 1:
                self._primitive(buf, desc, v)
            else:
                if sequence:
                    n = 0 if v is None else len(v)
                    self._align(buf, 4)
                    buf += struct.pack("<I", n)
                else:
                    n = count
                if is_msg:
                    self._messages(buf, desc, v, n)
                else:
                    self._primitives(buf, desc, v, n)

    def _primitive(self, buf: bytearray, base: str, v) -> None:
        if base in ("string", "wstring"):
            self._string(buf, v)
            return
        fmt, size = _PRIM[base]
        self._align(buf, size)
        buf += struct.pack(fmt, v if v is not None else 0)

    def _primitives(self, buf: bytearray, base: str, v, n: int) -> None:
        if not n:
            return
        if base in ("string", "wstring"):
            for i in range(n):
                self._string(buf, v[i] if v is not None else "")
            return
        fmt, size = _PRIM[base]
        self._align(buf, size)
        arr = np.zeros(n, np.dtype(fmt)) if v is None else np.asarray(v, dtype=np.dtype(fmt)).reshape(n)
        buf += arr.tobytes()

    def _messages(self, buf: bytearray, typename: str, v, n: int) -> None:
        if not n:
            return
        flat = self.flat_block(typename)
        if flat is not None and (v is None or isinstance(v, np.ndarray)):
            dtype, k, size = flat
            self._align(buf, size)
            arr = np.zeros((n, k), dtype) if v is None else np.ascontiguousarray(v, dtype=dtype).reshape(n, k)
            buf += arr.tobytes()
            return
        for i in range(n):
            self._message(buf, typename, v[i] if v is not None else {})
