"""mbde ROS 2 nodes: thin rclpy adapters around the ROS-free cores of :mod:`mbde_core.live`.

Executables (console scripts of setup.py, :mod:`mbde_nodes.entry`): ``mbde-mechanism-model``,
``mbde-simulator``, ``mbde-imu-driver``, ``mbde-encoder-driver``, ``mbde-estimator``; each
module is also runnable as ``python -m mbde_nodes.<name> --ros-args ...``. Shared
plumbing: :mod:`mbde_nodes.common`.
"""
