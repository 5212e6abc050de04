"""State estimators (observers) and the stage that feeds them time-stamped measurements.

One interface (:class:`base.EstimatorInterface`), one module per observer, maths in
docstrings with the paper's equation numbers. Options go through one pipeline, load ->
validate -> resolve (:mod:`.configure`), into each estimator's frozen typed options;
``make_estimator(name, ...)`` builds one by name (:mod:`.registry`: one line per estimator).

Layers (a module imports only from the layers below it; ``|`` = independent siblings;
checked by the ``estimators-*`` contracts of ``.importlinter``)::

    stage                          the stage, its guards, recovery and the multi-start bank
    configure | assess.suitability the options pipeline; is an estimator meaningful here
    particle                       the particle filters (the Gaussian follower by name)
    kalman | assess.symmetry       the Kalman observers; mirror-image ambiguity
    base                           the interface, Estimator, InitialState, UpdateResult
    options | assess.metrics | registry | traits | innovation | noise
    chi2

The registry is a table of ``"module:Class"`` strings imported on demand, so it imports
nothing statically; the classes it loads are asked for only from above them (configure and
suitability load any estimator, the particle filters' follower a Kalman observer).
"""
from mbde_core.estimators.configure import make_estimator  # noqa: F401
from mbde_core.estimators.registry import ESTIMATOR_NAMES, estimator_rng  # noqa: F401
