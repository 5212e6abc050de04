"""Offline evaluation of estimators on ROS 2 bags (`mbde replay`), without ROS."""
