"""Adding an estimator is one module and one registry line: a toy observer, registered here,
runs through ``mbde replay``, ``mbde tune`` and the live estimator core (mbde_core.live,
without rclpy), which learn everything they need from its traits."""
from __future__ import annotations

import json

import numpy as np
import pytest

from mbde_core.engine import dynamics, kinematics
from mbde_core.estimators import registry
from mbde_core.estimators.base import CovarianceInflation, Estimator, UpdateResult
from mbde_core.estimators.traits import KALMAN_TUNABLE, Traits
from mbde_core.types import MechanismSnapshot


class ToyObserver(CovarianceInflation, Estimator):
    """An EKF on x = [z, zd]: forward Euler with the model's accelerations, the simple
    transition Jacobian, the Jacobian of the readings by central differences. The common
    Kalman options (plant noise, sensor sigmas, ...) and no others."""

    name = "toy"
    traits = Traits(cost=0.5, color=(0.1, 0.2, 0.3, 1.0), tunable=KALMAN_TUNABLE)

    def reset(self, t, init):
        g = self.mech.dof
        self.t = float(t)
        self.x = np.concatenate([np.asarray(init.z, float), np.asarray(init.zd, float)])
        self.P = np.diag(np.concatenate([np.broadcast_to(init.sigma_z, (g,)), np.broadcast_to(init.sigma_zd, (g,))]) ** 2)
        self.q = np.asarray(self.mech.q0 if init.q_hint is None else init.q_hint, float)
        self._assemble(self.x)

    def _assemble(self, x):
        g = self.mech.dof
        q, ok = kinematics.solve_position(self.mech, x[:g], self.q)
        if not ok:
            raise ValueError("cannot assemble")
        return q, kinematics.velocity(self.mech, q, x[g:])

    def predict(self, dt):
        g = self.mech.dof
        q, qd = self._assemble(self.x)
        self.q = q
        zdd = dynamics.forward(self.mech, self.t, q, qd)[0]
        self.x = np.concatenate([self.x[:g] + dt * self.x[g:], self.x[g:] + dt * zdd])
        F = np.eye(2 * g)
        F[:g, g:] = dt * np.eye(g)
        self.P = F @ self.P @ F.T + self.plant_noise(dt)
        self.t += dt

    def _h(self, names, x):
        q, qd = self._assemble(x)
        return np.concatenate([self.sensors[n].h(q, qd) for n in names])

    def update(self, measurements, gates=None):
        names = [m.sensor for m in measurements]
        o = np.concatenate([np.asarray(m.value, float) for m in measurements])
        h0 = self._h(names, self.x)
        H = np.empty((h0.size, self.x.size))
        for k in range(self.x.size):
            e = np.zeros(self.x.size)
            e[k] = 1e-6
            H[:, k] = (self._h(names, self.x + e) - self._h(names, self.x - e)) / 2e-6
        sig = self.options.sensor_sigma
        R = np.diag(np.concatenate([np.full(self.sensors[n].dim, float(sig[n]) ** 2) if n in sig
                                    else np.diag(self.sensors[n].covariance()) for n in names]))
        y = o - h0
        S = H @ self.P @ H.T + R
        K = self.P @ H.T @ np.linalg.inv(S)
        self.x = self.x + K @ y
        self.P = (np.eye(self.x.size) - K @ H) @ self.P
        self.q = self._assemble(self.x)[0]
        nis = float(y @ np.linalg.solve(S, y))
        return UpdateResult(names, [], nis, int(y.size), y, y / np.sqrt(np.diag(S)), float(np.linalg.slogdet(S)[1]))

    def estimate(self):
        g = self.mech.dof
        q, qd = self._assemble(self.x)
        zdd, qdd = dynamics.forward(self.mech, self.t, q, qd)
        return MechanismSnapshot(stamp=self.t, q=q, qd=qd, qdd=qdd, z=self.x[:g].copy(), zd=self.x[g:].copy(),
                                 zdd=zdd, cov=self.P.copy())


@pytest.fixture(scope="module")
def toy():
    registry.register("toy", ToyObserver)
    yield "toy"
    registry.unregister("toy")


@pytest.fixture(scope="module")
def bag(tmp_path_factory):
    from mbde_core.live.model_source import load_source
    from mbde_core.simulator.bag import write_simulation_bag

    sc = load_source(scenario_file="scenarios/fourbar_gyro.yaml", settings=["duration=1.0"])
    out = tmp_path_factory.mktemp("toy") / "bag"
    write_simulation_bag(sc, out)
    return out


def test_replay_runs_the_toy(toy, bag, tmp_path):
    from mbde_core.cli.main import main

    out = tmp_path / "out"
    assert main(["replay", str(bag), "--estimators", "toy", "--out", str(out), "--jobs", "1", "--no-plots"]) == 0
    doc = json.loads((out / "metrics.json").read_text())
    m = doc["estimators"]["toy"]["metrics"]
    assert m["rmse"]["z"][0] < 0.05 and m["counters"]["fused"] > 150
    assert doc["estimators"]["toy"]["config"]["step"] > 0  # `auto` resolved by the rule (traits: noise_rule kalman)


def test_tune_fits_the_toy(toy, bag, tmp_path, capsys):
    from mbde_core.cli.main import main

    out = tmp_path / "tuned.yaml"
    assert main(["tune", str(bag), "--estimators", "toy", "--window", "0.5", "--jobs", "1", "--out", str(out)]) == 0
    import yaml

    doc = yaml.safe_load(out.read_text())
    assert doc["toy"]["plant_noise"]["acceleration_psd"] > 0


def test_live_core_runs_the_toy(toy, bag):
    from mbde_core.live.estimator import EstimatorOptions, LiveEstimator, load_config
    from mbde_core.live.model_source import from_description
    from mbde_core.rosio.bag import BagReader
    from mbde_core.rosio.convert import string_from_msg
    from mbde_core.rosio.factory import RosbagsFactory

    with BagReader(bag) as r:
        desc = next(string_from_msg(m) for _, _, m in r.messages(["/mbde/description"]))
        topics = [t for t, _, _ in r.topics() if t.startswith("/mbde/sensors/")]
        msgs = list(r.messages(topics))
    published = {}
    opts = EstimatorOptions("toy", load_config("toy", "estimators/default.yaml"), publish_rate=0.0, marker_rate=10.0)
    core = LiveEstimator(from_description(desc), opts, RosbagsFactory(),
                         lambda key, msg: published.setdefault(key, []).append(msg))
    for topic, t, msg in msgs:
        core.on_message(topic, msg, t + 0.002)
    assert len(published["state"]) > 150 and core.errors == 0
    label = [mk for mk in published["markers"][-1].markers if mk.ns == "toy/label"][0]
    assert (label.color.r, label.color.g, label.color.b) == pytest.approx((0.1, 0.2, 0.3))  # its traits' colour
