"""MarkerArray CDR of same-shaped frames by patching a template.

An estimator's markers in the estimates bag (:mod:`mbde_core.replay.viewables`, every
0.1 s of data time) have the same *shape* from frame to frame: the same markers (kind,
namespace, id, text), the same number of points and colours; only the stamp, the
vertices, the colours and sizes change. :class:`MarkerArrayTemplate` writes the first
frame of a shape with :func:`~mbde_core.viz.marker_msgs.marker_array_cdr` (the
:class:`~mbde_core.rosio.cdr_writer.CdrWriter`), finds the byte offsets of its numbers
(:class:`~mbde_core.rosio.cdr_batch.Layout`) and writes the next frames of that shape
into a copy of those bytes: the stamp and every number :func:`marker_values` sets, packed
as the writer packs them (struct for scalars, numpy blocks for points and per-vertex
colours), so the bytes are identical (test/test_marker_cdr.py). A frame of another
shape (a marker emptied, a longer label) is written by the CdrWriter and becomes the
template.
"""
from __future__ import annotations

import struct

import numpy as np

from mbde_core.rosio.cdr_batch import Layout, LayoutError
from mbde_core.rosio.cdr_writer import CdrWriter
from mbde_core.rosio.stamps import sec_to_stamp
from mbde_core.viz.marker_msgs import MARKER_ARRAY, marker_array_cdr


def _shape_key(s) -> tuple:
    """What fixes a marker's bytes apart from its numbers."""
    n = len(np.asarray(s.xy).reshape(-1, 2)) if s.kind != "text" else 1
    colors = None if s.colors is None else len(np.asarray(s.colors).reshape(-1, 4))
    return s.kind, s.ns, int(s.id), s.empty, n, colors, s.text if s.kind == "text" else None


class MarkerArrayTemplate:
    """CDR bytes of :func:`marker_array_cdr` for a stream of frames (module doc)."""

    def __init__(self, store):
        self.writer = CdrWriter(store)
        self.store = store
        self.key = None
        self.template = b""
        self.slots: list = []

    def serialize(self, shapes, frame_id: str, stamp: float) -> bytes:
        key = (str(frame_id), tuple(_shape_key(s) for s in shapes))
        if key != self.key:
            data = marker_array_cdr(self.writer, shapes, frame_id, stamp)
            try:
                self.slots = self._compile(data, shapes)
                self.key, self.template = key, data
            except (LayoutError, KeyError):
                self.key = None
            return data
        return self._fill(shapes, stamp)

    def _compile(self, data: bytes, shapes) -> list:
        """Per marker: the offsets of its stamp, colour, scale, position and blocks."""
        slots = Layout(self.store, MARKER_ARRAY, data).slots
        out = []
        for i, s in enumerate(shapes):
            p = f"markers[{i}]."
            off = lambda name: slots[p + name][0]  # noqa: E731
            entry = {"sec": off("header.stamp.sec"), "nanosec": off("header.stamp.nanosec")}
            if not s.empty:
                entry["color"] = [off("color." + c) for c in "rgba"]
                entry["scale"] = [off("scale." + c) for c in "xyz"]
                if s.kind == "text":
                    entry["position"] = [off("pose.position." + c) for c in "xyz"]
                else:
                    n = len(np.asarray(s.xy).reshape(-1, 2))
                    entry["points"] = self._block(slots, p + "points", n, ("x", "y", "z"), 8)
                    if s.colors is not None:
                        entry["colors"] = self._block(slots, p + "colors", len(np.asarray(s.colors).reshape(-1, 4)),
                                                      ("r", "g", "b", "a"), 4)
            out.append(entry)
        return out

    @staticmethod
    def _block(slots, path: str, n: int, fields, size: int):
        """Offset of a contiguous block of n messages of len(fields) numbers of ``size`` bytes."""
        if n == 0:
            return None
        first, last = slots[f"{path}[0].{fields[0]}"][0], slots[f"{path}[{n - 1}].{fields[-1]}"][0]
        if last - first != (n * len(fields) - 1) * size:
            raise LayoutError(f"{path}: not one block")
        return first

    def _fill(self, shapes, stamp: float) -> bytes:
        buf = bytearray(self.template)
        sec, nanosec = sec_to_stamp(stamp)
        for s, entry in zip(shapes, self.slots):
            struct.pack_into("<i", buf, entry["sec"], sec)
            struct.pack_into("<I", buf, entry["nanosec"], nanosec)
            if s.empty:
                continue
            for o, v in zip(entry["color"], s.color):
                struct.pack_into("<f", buf, o, float(v))
            size = float(s.size)
            sx, sy, sz = entry["scale"]
            if s.kind == "text":
                struct.pack_into("<d", buf, sz, size)
                x, y, z = entry["position"]
                struct.pack_into("<d", buf, x, float(s.xy[0, 0]))
                struct.pack_into("<d", buf, y, float(s.xy[0, 1]))
                struct.pack_into("<d", buf, z, float(s.z))
                continue
            struct.pack_into("<d", buf, sx, size)
            if s.kind == "points":
                struct.pack_into("<d", buf, sy, size)
                struct.pack_into("<d", buf, sz, size)
            if entry["points"] is not None:
                xy = np.asarray(s.xy, float).reshape(-1, 2)
                pts = np.column_stack([xy, np.full(len(xy), float(s.z))])
                data = np.ascontiguousarray(pts, dtype="<f8").tobytes()
                buf[entry["points"]: entry["points"] + len(data)] = data
            if entry.get("colors") is not None:
                data = np.ascontiguousarray(np.asarray(s.colors, float).reshape(-1, 4), dtype="<f4").tobytes()
                buf[entry["colors"]: entry["colors"] + len(data)] = data
        return bytes(buf)
