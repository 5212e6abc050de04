"""mbde_core.api: the notebook API builds any estimator from its options and tracks a
simulated linkage from readings given as arrays (checked against the simulation's truth)."""
import numpy as np
import pytest

from mbde_core import api
from mbde_core.errors import ConfigError


@pytest.fixture(scope="module")
def run():
    return api.simulate("config/scenarios/fourbar_gyro.yaml", duration=1.5)


def _errors(f, truth):
    est = f.estimates()
    k = np.searchsorted(truth.t, est["t"] - 1e-9)
    e = np.hstack([est["z"] - truth.z[k], est["zd"] - truth.zd[k]])
    nees = np.einsum("ki,kij,kj->k", e, np.linalg.inv(est["P"]), e)
    return est, e, nees


@pytest.mark.parametrize("name", ["ukf", "errorekf", "pf"])
def test_filter_tracks_the_truth_consistently(run, name):
    truth, sc = run
    f = api.Filter.from_scenario(name, sc, seed=1)
    f.feed(truth.measurements)
    est, e, nees = _errors(f, truth)
    late = est["t"] > (est["t"][0] + 1.0 if name == "pf" else -np.inf)  # the PF's uniform start: its first second
    assert np.sqrt(np.mean(e[late, 0] ** 2)) < 0.03  # rad
    assert 0.3 * 2 < np.mean(nees[late]) < 3 * 2  # the acceptance band [0.3, 3] x 2g
    assert f.x.shape == (2,) and f.P.shape == (2, 2) and np.allclose(f.P, f.P.T)
    assert f.counters["fused"] == len(truth.measurements["gyro_coupler"][0])


def test_update_one_reading_at_a_time_equals_feeding_arrays(run):
    truth, sc = run
    a = api.Filter.from_scenario("errorekf", sc).feed(truth.measurements)
    b = api.Filter.from_scenario("errorekf", sc)
    for t, v in zip(*truth.measurements["gyro_coupler"]):
        b.update(t, "gyro_coupler", v)
    b.flush()
    ea, eb = a.estimates(), b.estimates()
    assert np.array_equal(ea["t"], eb["t"]) and np.array_equal(ea["z"], eb["z"]) and np.array_equal(ea["P"], eb["P"])


def test_options_as_a_mapping_and_errors_name_the_key(run):
    truth, sc = run
    mech, sensors = sc.estimator_mechanism(), sc.estimator_sensors()
    f = api.Filter("ukf", mech, sensors, {"plant_noise": {"acceleration_psd": 0.5}, "step": 0.01})
    assert f.dt == 0.01 and f.config["plant_noise"]["acceleration_psd"] == 0.5
    with pytest.raises(ConfigError, match=r"ukf.plant_noise.acceleration_ps.*unknown key"):
        api.Filter("ukf", mech, sensors, {"plant_noise": {"acceleration_ps": 0.5}})
    with pytest.raises(ConfigError, match="unknown estimator"):
        api.Filter("kalman", mech, sensors)
    with pytest.raises(ConfigError, match="not an independent coordinate"):
        api.Filter("ukf", mech, sensors, initial={"phi": 1.0})
    s = api.load_sensors([{"name": "g", "type": "gyroscope", "body": "coupler", "rate": 100, "noise": {"sigma": 0.01}}], mech)
    assert s.names == ["g"]
