"""``mbde tune``: noise parameters of the observers fitted to a bag's readings alone.

- :mod:`~mbde_core.tuning.likelihood`: the innovation log-likelihood of one filter run;
- :mod:`~mbde_core.tuning.search`: the bounded log-space search (scipy.optimize);
- :mod:`~mbde_core.tuning.output`: the before/after table and the tuned config file.
"""
from mbde_core.tuning.likelihood import InnovationFit, innovation_fit
from mbde_core.tuning.search import TuneResult, tune

__all__ = ["InnovationFit", "TuneResult", "innovation_fit", "tune"]
