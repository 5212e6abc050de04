"""The ``/mbde/description`` document of a simulated bag: write it, read it back.

``mbde simulate`` stores one std_msgs/String (transient_local QoS) at the bag's start
time, holding this YAML document::

    format: mbde/simulation-description/1
    mbde_version: 0.1.0
    scenario: {...}        # the self-contained scenario document (Scenario.document()):
                           # the mechanism document inline, the sensors list inline, the
                           # loads, speed controller, initial state, model errors, seed...
    sources: {scenario: path, mechanism: path, sensors: path or null}
    model_errors: "gravity +1 m/s^2"         # human-readable summary
    truth:                 # what the simulator integrated (to check a rebuild against)
      coordinate_names: [...]
      independent_names: [...]
      q0: [...]            # initial state (exact float64 values)
      qd0: [...]
      branch: 0
      inputs: [motor]      # true input names (MechanismState.input_names)
    estimator: {q0: [...], qd0: [...]}   # the estimator's initial guess
    topics:                # topic -> what it holds
      ground_truth: /mbde/ground_truth
      ground_truth_joint_states: /mbde/ground_truth/joint_states
      sensors: [{name, type, topic, frame_id, rate, channels, msg_type, reference}]

:func:`scenario_from_description` rebuilds the :class:`Scenario` (truth model, sensors,
the estimator's model with its errors) from that text alone, and checks that the rebuilt
initial states equal the recorded ones; :func:`scenario_from_bag` does the same from a
bag directory.
"""
from __future__ import annotations

import numpy as np
import yaml

from mbde_core import __version__
from mbde_core.errors import ConfigError, DataError
from mbde_core.rosio.bag import BagReader
from mbde_core.rosio.convert import string_from_msg
from mbde_core.scenario.scenario import Scenario

FORMAT = "mbde/simulation-description/1"
DESCRIPTION_TOPIC = "/mbde/description"
GROUND_TRUTH_TOPIC = "/mbde/ground_truth"
GROUND_TRUTH_JOINTS_TOPIC = "/mbde/ground_truth/joint_states"


def description_document(scenario) -> dict:
    """The description (a plain dict, see the module docstring) of a scenario."""
    truth = scenario.truth_mechanism()
    init = scenario.initial_state
    est = scenario.estimator_initial_state()
    sensors = []
    for reference, sset in ((False, scenario.sensors), (True, scenario.reference_sensors)):
        for s in sset.ordered:  # known-input sensors (a measured torque) too
            d = s.describe()
            d["period"] = scenario.sensor_every[s.name] * scenario.step
            d["reference"] = reference
            sensors.append(d)
    inputs = [ld.name for ld in scenario.truth_model().mechanism.spec.loads if ld.kind == "generalized_force"]
    return {
        "format": FORMAT,
        "mbde_version": __version__,
        "scenario": scenario.document(),
        "sources": {"scenario": scenario.file, "mechanism": scenario.mechanism_file,
                    "sensors": scenario.sensors_file},
        "model_errors": scenario.model_errors.describe(),
        "truth": {
            "coordinate_names": list(truth.coordinate_names),
            "independent_names": list(truth.independent_names),
            "q0": [float(v) for v in init.q],
            "qd0": [float(v) for v in init.qd],
            "branch": int(init.branch),
            "inputs": inputs,
        },
        "estimator": {"q0": [float(v) for v in est.q], "qd0": [float(v) for v in est.qd]},
        "topics": {
            "description": DESCRIPTION_TOPIC,
            "ground_truth": GROUND_TRUTH_TOPIC,
            "ground_truth_joint_states": GROUND_TRUTH_JOINTS_TOPIC,
            "sensors": sensors,
        },
    }


def write_description(scenario) -> str:
    """The description as YAML text (floats written exactly: repr round-trips)."""
    return yaml.safe_dump(description_document(scenario), sort_keys=False, default_flow_style=None, width=100)


def read_description(text: str, label: str = "<description>") -> dict:
    """Parse and check a description document; DataError (one line) if it is not one."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise DataError(f"{label}: the description is not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise DataError(f"{label}: not an mbde simulation description (format {got!r}, expected {FORMAT!r})")
    for key in ("scenario", "truth"):
        if not isinstance(doc.get(key), dict):
            raise DataError(f"{label}: the description has no {key!r} mapping")
    return doc


def scenario_from_description(text: str, label: str = "<description>", check: bool = True):
    """Rebuild the Scenario of a description text.

    check: verify the rebuilt initial states (truth and estimator) and coordinate names
    equal the recorded ones (DataError otherwise, e.g. after an incompatible change).
    """
    doc = read_description(text, label)
    try:
        scenario = Scenario(doc["scenario"], file=f"{label}:scenario", base_dir=None)
    except ConfigError as exc:
        raise DataError(f"{label}: the embedded scenario does not load: {exc}") from None
    if check:
        _check(scenario, doc, label)
    return scenario


def scenario_from_bag(path, check: bool = True):
    """Rebuild the Scenario recorded in a bag's /mbde/description (DataError if none)."""
    with BagReader(path) as bag:
        if DESCRIPTION_TOPIC not in {t for t, _, _ in bag.topics()}:
            raise DataError(f"{path}: no {DESCRIPTION_TOPIC} topic (not a bag written by mbde simulate)")
        for _, _, msg in bag.messages([DESCRIPTION_TOPIC], strict=True):
            return scenario_from_description(string_from_msg(msg), f"{path}{DESCRIPTION_TOPIC}", check)
    raise DataError(f"{path}: {DESCRIPTION_TOPIC} holds no message")


def _check(scenario, doc, label):
    truth = doc["truth"]
    mech = scenario.truth_mechanism()
    if list(truth.get("coordinate_names", [])) != list(mech.coordinate_names):
        raise DataError(f"{label}: rebuilt coordinates {mech.coordinate_names} differ from the recorded ones")
    scale = max(1.0, mech.length_scale)
    pairs = [(scenario.initial_state.q, truth.get("q0")), (scenario.initial_state.qd, truth.get("qd0"))]
    est = doc.get("estimator") or {}
    e0 = scenario.estimator_initial_state()
    if "q0" in est:
        pairs += [(e0.q, est.get("q0")), (e0.qd, est.get("qd0"))]
    for got, want in pairs:
        want = np.asarray(want, dtype=float)
        if want.shape != got.shape or not np.allclose(got, want, rtol=1e-9, atol=1e-9 * scale):
            raise DataError(f"{label}: the rebuilt initial state differs from the recorded one "
                            f"(max diff {np.max(np.abs(got - want)) if want.shape == got.shape else 'shape'})")
