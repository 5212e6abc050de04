"""ROS-free message and bag layer (never imports rclpy).

Modules, each importable on its own:

- :mod:`mbde_core.rosio.typestore`: the cached ``rosbags`` typestore (ROS 2 Humble
  types + ``mbde_msgs`` types parsed from the ``.msg`` files).
- :mod:`mbde_core.rosio.factory`: the message-factory interface and its ``rosbags``
  implementation (messages built with every field defaulted).
- :mod:`mbde_core.rosio.stamps`: seconds <-> ``builtin_interfaces/Time`` / nanoseconds,
  exact to the nanosecond.
- :mod:`mbde_core.rosio.convert`: ROS messages <-> :mod:`mbde_core.types` objects. Only
  reads/sets attributes, so the same code serves ``rosbags`` and rclpy messages.
- :mod:`mbde_core.rosio.bag`: :class:`BagWriter`, :class:`BagReader`, :func:`bag_info`
  (rosbag2, sqlite3 or mcap storage), implemented in ``bag_writer`` / ``bag_reader``
  (one-line error messages: ``bagerrors``).

``convert``, ``stamps`` and ``factory`` import neither ``rosbags`` nor ROS at module
level; ``typestore`` and the bag modules need ``rosbags``.
"""
