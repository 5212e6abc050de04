"""mbde_core: pure-Python multibody engine, sensors and estimators (never imports rclpy)."""

__version__ = "0.1.0"
