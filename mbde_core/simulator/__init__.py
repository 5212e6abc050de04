"""Ground-truth simulation of scenarios (:mod:`mbde_core.simulator.core`) and its ROS 2
bag output (:mod:`mbde_core.simulator.bag`)."""
from mbde_core.simulator.core import (  # noqa: F401
    SimulationError,
    SimulationResult,
    TruthSnapshot,
    noise_rng,
    run,
    simulate,
)
