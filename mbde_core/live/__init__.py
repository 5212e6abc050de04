"""ROS-free cores of the live ROS 2 nodes (``mbde_nodes`` only adds rclpy plumbing).

- :mod:`params`: the ONE parameter schema of every node: the nodes declare their
  parameters (with descriptors) from it, and it validates the ROS parameter files in
  ``config/params/``.
- :mod:`paths`: finding shipped config files (checkout, pip or colcon install).
- :mod:`model_source`: the Scenario a node works on (scenario file, mechanism +
  sensors files, or the ``/mbde/description`` text).
- :mod:`simulator`: real-time pacing of :func:`mbde_core.simulator.simulate`.
- :mod:`drivers`: virtual sensor drivers sampling the ground truth.
- :mod:`estimator`: the estimator node's core around
  :class:`mbde_core.estimators.stage.core.EstimatorStage` (the stage ``mbde replay`` runs).
- :mod:`diagnostics`: diagnostic_msgs/DiagnosticArray building (ROS-free).
- :mod:`topics`: the topic names and types every node publishes / subscribes.

Nothing here imports rclpy; messages are built through a message factory
(:mod:`mbde_core.rosio.factory`), so the pure-Python tests drive these cores with
``rosbags`` messages exactly as the nodes drive them with rclpy messages.
"""
