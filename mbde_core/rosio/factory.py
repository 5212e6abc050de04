"""Message factories: the only place where conversion code meets a message library.

A factory has three methods (see :class:`MessageFactory`); conversion code in
:mod:`mbde_core.rosio.convert` otherwise only reads and sets message attributes, writes
fixed-size arrays in place (``msg.orientation_covariance[0] = -1.0``) and assigns lists
of ``str`` to ``string[]`` fields. This works identically for

- ``rosbags`` dataclass messages (:class:`RosbagsFactory`, offline tools), and
- rclpy messages (the node layer's factory, to be written in ``mbde_nodes``; this
  sketch was checked against the rclpy 7.1.6 Jazzy wheels: every conversion gives the
  same values through rclpy and rosbags serialization, both ways):

.. code-block:: python

    import array, importlib
    import numpy as np
    from mbde_core.rosio.stamps import sec_to_stamp

    class RclpyFactory:
        '''MessageFactory over rclpy-generated message classes (lives in mbde_nodes).'''
        TYPECODES = {"float64": "d", "float32": "f", "int32": "i", "uint32": "I",
                     "int64": "q", "uint64": "Q", "int16": "h", "uint16": "H",
                     "int8": "b", "uint8": "B"}

        def new(self, typename):             # 'sensor_msgs/msg/Imu' -> Imu()
            pkg, sub, name = typename.split("/")
            return getattr(importlib.import_module(f"{pkg}.{sub}"), name)()

        def array(self, values, dtype):      # rclpy setters accept array.array as is
            arr = np.ascontiguousarray(values, dtype=dtype).ravel()
            return array.array(self.TYPECODES[dtype], arr.tobytes())

        def time(self, t):
            from builtin_interfaces.msg import Time
            sec, nanosec = sec_to_stamp(t)
            return Time(sec=sec, nanosec=nanosec)
"""
from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from mbde_core.rosio import typestore as ts
from mbde_core.rosio.stamps import sec_to_stamp


class MessageFactory(Protocol):
    """What conversion code may ask of a message library."""

    def new(self, typename: str) -> Any:
        """A message of ``typename`` ('pkg/msg/Name') with every field defaulted."""

    def array(self, values, dtype: str) -> Any:
        """A value assignable to a variable-length numeric field (``float64[]`` ...).

        values: (n,) array-like; dtype: ROS/numpy scalar name ('float64', 'int32', 'uint32').
        """

    def time(self, t: float) -> Any:
        """builtin_interfaces/Time for t [s] (ns-exact, see :mod:`mbde_core.rosio.stamps`)."""


_NUMPY_DTYPE = {"bool": "bool_", "char": "uint8"}  # as rosbags stores them


class RosbagsFactory:
    """MessageFactory building ``rosbags`` dataclass messages of a typestore.

    Defaults: numbers 0, bool False, strings '', nested messages built recursively,
    fixed-size arrays of their length (numeric: zero np.ndarray; string/message: list),
    variable-length sequences empty (numeric: empty np.ndarray; string/message: []).
    Numeric arrays are ``np.ndarray`` of the field's dtype, as ``rosbags`` deserializes them.
    """

    def __init__(self, typestore=None):
        """typestore: a rosbags Typestore; default :func:`mbde_core.rosio.typestore.get_typestore`."""
        self.typestore = ts.get_typestore() if typestore is None else typestore
        self._defs = ts.fielddefs(self.typestore)

    def new(self, typename: str) -> Any:
        """A message of ``typename`` with every field defaulted (KeyError if unknown type)."""
        cls = self.typestore.types[typename]
        _, fields = self._defs[typename]
        return cls(**{name: self._default(desc) for name, desc in fields})

    def array(self, values, dtype: str) -> np.ndarray:
        """(n,) np.ndarray of dtype, a copy of values (flattened)."""
        return np.array(values, dtype=_NUMPY_DTYPE.get(dtype, dtype)).ravel()

    def time(self, t: float) -> Any:
        """builtin_interfaces/msg/Time for t [s]."""
        sec, nanosec = sec_to_stamp(t)
        return self.typestore.types["builtin_interfaces/msg/Time"](sec=sec, nanosec=nanosec)

    def _default(self, desc) -> Any:
        kind, rest = desc  # rosbags Nodetype: 1 BASE, 2 NAME, 3 ARRAY, 4 SEQUENCE
        kind = int(kind.value if hasattr(kind, "value") else kind)
        if kind == 1:
            base = rest[0] if isinstance(rest, tuple) else rest
            return "" if base in ("string", "wstring") else False if base == "bool" else (
                0.0 if base.startswith("float") else 0)
        if kind == 2:
            return self.new(rest)
        (sub_kind, sub), count = rest
        sub_kind = int(sub_kind.value if hasattr(sub_kind, "value") else sub_kind)
        count = count if kind == 3 else 0
        if sub_kind == 1:
            base = sub[0] if isinstance(sub, tuple) else sub
            if base not in ("string", "wstring"):
                return np.zeros(count, dtype=_NUMPY_DTYPE.get(base, base))
        return [self._default((sub_kind, sub)) for _ in range(count)]
