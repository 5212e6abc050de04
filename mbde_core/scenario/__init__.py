"""Scenarios: simulated experiments (mechanism, sensors, initial state, loads, model
errors, run settings) and their self-description stored in bags.

- :mod:`mbde_core.scenario.scenario`: the YAML format, :func:`load_scenario`, :class:`Scenario`;
- :mod:`mbde_core.scenario.controller`: the PI speed controller (paper 004);
- :mod:`mbde_core.scenario.model_errors`: errors of the estimator's model (papers 000, 003);
- :mod:`mbde_core.scenario.overrides`: ``--set key.path=value``;
- :mod:`mbde_core.scenario.description`: the ``/mbde/description`` document of a bag.
"""
from mbde_core.scenario.scenario import InitialState, Scenario, TruthModel, load_scenario  # noqa: F401
