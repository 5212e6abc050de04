"""Pictures of mechanisms and estimates, one builder for RViz and for matplotlib.

- :mod:`mbde_core.viz.markers`: :class:`Shape` primitives (line lists, polylines,
  sphere lists, texts in the mechanism plane) of the ground truth, the estimates, the
  particle filter's hypotheses and the 95 % confidence ellipses, and their conversion to
  ``visualization_msgs/MarkerArray`` through a message factory (ROS-free).
- :mod:`mbde_core.viz.render`: the same shapes drawn with matplotlib, and the
  ``mbde render`` animation of a bag.
"""
