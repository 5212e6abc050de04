"""Virtual sensors h(q, qd, qdd) with analytic Jacobians and noise models (paper 000
sec. 4.1, paper 003 sec. 2 and 4, paper 004 sec. 4.2).

Use :func:`mbde_core.sensors.config.load_sensors` to build a :class:`SensorSet` from the
``sensors:`` section of a mechanism or scenario YAML file.
"""
from mbde_core.sensors.base import NoiseModel, Sensor  # noqa: F401
from mbde_core.sensors.sensor_set import SensorSet  # noqa: F401
