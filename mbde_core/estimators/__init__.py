"""State estimators (observers) and the stage that feeds them time-stamped measurements.

One interface (:class:`base.Estimator`), one module per observer, maths in docstrings
with the paper's equation numbers. ``make_estimator(name, ...)`` builds one by name.
"""
from mbde_core.estimators.registry import ESTIMATOR_NAMES, estimator_rng, make_estimator  # noqa: F401
