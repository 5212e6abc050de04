"""``mbde bench transfer``'s run task on a short simulated bag: a row for every kind of
estimator (a Kalman observer, the particle filters whose sigma is derived inside the
filter, the ADE-KF refused without an accelerometer), metrics finite."""
import math

import pytest

from mbde_bench.common import simulate_scenario_bag

from mbde_core.config.paths import config_path
from mbde_bench.transfer_runs import _psd, run_task


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    name, inputs = simulate_scenario_bag(config_path("scenarios", "fourbar_encoder.yaml"), 1.5, str(tmp_path_factory.mktemp("bags")))
    return {name: inputs}


@pytest.mark.parametrize("name", ["ukf", "pf", "vipf"])
def test_run_task_gives_a_finite_row(shared, name):
    row = run_task(shared, ("fourbar_encoder", name, "defaults", None, 0))
    assert row["status"] in ("pass", "fail"), row.get("note")
    assert math.isfinite(row["rmse"]) and math.isfinite(row["nees"]) and row["nees"] >= 0.0
    assert row["rmse_ss"] < 0.05  # rad: an encoder pins the crank after the first second


def test_adekf_without_accelerometer_is_not_applicable(shared):
    assert run_task(shared, ("fourbar_encoder", "adekf", "defaults", None, 0))["status"] == "n/a"


def test_psd_of_a_pf_with_derived_sigma_is_unknown():
    assert _psd({"acceleration_sigma": None, "step": 0.005}) is None
    assert _psd({"acceleration_sigma": 2.0, "step": 0.005}) == pytest.approx(0.02)
