"""The Scenario a node works on: from a scenario file, a mechanism (+ sensors) file, or the
``/mbde/description`` text (what ``mbde simulate`` writes into bags and the
``mechanism_model`` node publishes).

Everything is a :class:`~mbde_core.scenario.Scenario`, so the nodes and ``mbde replay``
derive the truth model, the estimator's model (with the scenario's model errors), the
sensors and the initial states the same way. A mechanism file alone becomes a minimal
scenario: its sensors (``sensors:`` section or a sensors file), no loads beyond the
file's, the file's initial configuration, no model errors.
"""
from __future__ import annotations

import math
import os

from mbde_core.config.paths import resolve
from mbde_core.config.yamlnode import Node
from mbde_core.errors import ConfigError
from mbde_core.model.mechanism import load_mechanism
from mbde_core.rosio.stamps import sec_to_ns
from mbde_core.scenario.description import scenario_from_description
from mbde_core.scenario.scenario import Scenario, load_scenario
from mbde_core.sensors.config import load_sensor_file, load_sensors


def scenario_for_mechanism(mechanism_file: str, sensors_file: str | None = None):
    """Minimal Scenario of a mechanism file and its sensors (see the module docstring).

    The internal step is the greatest common divisor of the sensor periods (whole ns),
    so every sensor period is a multiple of it; duration = one step (nothing is simulated).
    """
    mech_path = resolve(mechanism_file, "mechanism file")
    sens_path = resolve(sensors_file, "sensors file") if sensors_file else None
    mech = load_mechanism(mech_path)
    if sens_path:
        sensors = load_sensor_file(sens_path, mech)
    else:
        sensors = load_sensors(Node(mech.spec.sensors, mech_path, "sensors"), mech)
    step_ns = 0
    for s in sensors:
        step_ns = math.gcd(step_ns, max(1, sec_to_ns(s.period)))
    step_ns = step_ns or 1_000_000
    doc = {"name": mech.name, "description": f"mechanism {mech.name} and its sensors (no simulation)",
           "mechanism": mech_path, "duration": step_ns / 1e9, "step": step_ns / 1e9}
    if sens_path:
        doc["sensors_file"] = sens_path
    return Scenario(doc, file=mech_path, base_dir=os.path.dirname(mech_path))


def load_source(scenario_file: str = "", mechanism_file: str = "", sensors_file: str = "", settings=()):
    """The Scenario named by node parameters, or None when both files are '' (then the node
    waits for the description topic). ConfigError for bad files."""
    if scenario_file:
        if mechanism_file or sensors_file:
            raise ConfigError(scenario_file, "", "give scenario_file or mechanism_file/sensors_file, not both")
        return load_scenario(resolve(scenario_file, "scenario file"), list(settings or ()))
    if sensors_file and not mechanism_file:
        raise ConfigError(sensors_file, "", "sensors_file needs mechanism_file")
    if settings:
        raise ConfigError(mechanism_file or "<parameters>", "settings", "settings apply to a scenario_file only")
    if mechanism_file:
        return scenario_for_mechanism(mechanism_file, sensors_file or None)
    return None


def from_description(text: str, label: str = "/mbde/description"):
    """The Scenario of a description text (DataError if it is not one)."""
    return scenario_from_description(text, label)
