"""``mbde bench motors``'s reference twin (:func:`mbde_bench.motors.reference_document`):
the same motion as the motor run with the torque in the model, checked against the motor
run's own simulation (the truth it did not produce)."""
from __future__ import annotations

import copy

import numpy as np

from mbde_bench import motors
from mbde_core.config.paths import config_path
from mbde_core.estimators.options.rule import scenario_context
from mbde_core.scenario import load_scenario
from mbde_core.scenario.scenario import Scenario


def _doc(name: str, **changes) -> tuple:
    sc = load_scenario(config_path("bench", "motors", motors.SCENARIOS[name][0] + ".yaml"))
    doc = copy.deepcopy(sc.raw)
    doc.update(changes)
    return sc, doc


def test_the_four_bar_twin_runs_the_motor_run_with_the_torque_known(tmp_path):
    """The torque-profile four-bar: the twin's truth is the motor run's (same seed, 0.4 s:
    0.2 rad/s off the fall from rest), its model holds the torque (no unmodelled motor: no
    force limits for the rule) and it has no effort sensor; a speed controller stays the
    released document (a torque that depends on the state is no function of time)."""
    sc, doc = _doc("fourbar", duration=0.4, seed=7)
    ref = motors.reference_document(doc)
    assert [s["type"] for s in ref["sensors"]] == ["gyroscope"] and "unmodelled_loads" not in ref
    assert [ld["name"] for ld in ref["loads"]] == ["motor"]
    twin = Scenario(ref, file=sc.file, base_dir=sc.base_dir)
    assert scenario_context(twin) is None and len(twin.estimator_mechanism().spec.loads) == \
        len(Scenario(doc, file=sc.file, base_dir=sc.base_dir).estimator_mechanism().spec.loads) + 1
    run = motors._simulate(sc, doc, str(tmp_path / "motor"))
    same = motors.variant_inputs("released", sc, doc, str(tmp_path / "motor"))
    free = motors._simulate(sc, motors.released_document(doc), str(tmp_path / "free"))
    assert np.max(np.abs(run.truth.zd - free.truth.zd)) > 0.2  # the motor's motion, not the fall from rest
    np.testing.assert_allclose(same.truth.t, run.truth.t)
    np.testing.assert_allclose(same.truth.z, run.truth.z, atol=1e-9)
    np.testing.assert_allclose(same.truth.zd, run.truth.zd, atol=1e-8)
    _, step = _doc("moving")
    assert motors.reference_document(step) == motors.released_document(step)
