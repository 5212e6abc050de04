"""State estimators (observers) and the stage that feeds them time-stamped measurements.

One interface (:class:`base.EstimatorInterface`), one module per observer, maths in
docstrings with the paper's equation numbers. Options go through one pipeline, load ->
validate -> resolve (:mod:`.configure`), into each estimator's frozen typed options;
``make_estimator(name, ...)`` builds one by name (:mod:`.registry`: one line per estimator).
"""
from mbde_core.estimators.configure import make_estimator  # noqa: F401
from mbde_core.estimators.registry import ESTIMATOR_NAMES, estimator_rng  # noqa: F401
