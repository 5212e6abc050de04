"""The live estimator core's rig: a 1.5 s fourbar_gyro bag written by `mbde simulate`
(the ``bag`` fixture), its description and sensor messages, and a LiveEstimator on that
description publishing into a ``Sink`` (``live``)."""
from __future__ import annotations

import pytest

from mbde_core.live.estimator import EstimatorOptions, LiveEstimator, load_config
from mbde_core.live.model_source import from_description, load_source
from mbde_core.rosio.bag import BagReader
from mbde_core.rosio.convert import string_from_msg
from mbde_core.rosio.factory import RosbagsFactory

CONFIG = "estimators/default.yaml"


@pytest.fixture(scope="module")
def bag(tmp_path_factory):
    from mbde_core.simulator.bag import write_simulation_bag

    sc = load_source(scenario_file="scenarios/fourbar_gyro.yaml", settings=["duration=1.5"])
    out = tmp_path_factory.mktemp("live") / "bag"
    write_simulation_bag(sc, out)
    return out


def description(bag):
    with BagReader(bag) as r:
        for _, _, m in r.messages(["/mbde/description"]):
            return string_from_msg(m)


def sensor_messages(bag):
    with BagReader(bag) as r:
        topics = [t for t, _, _ in r.topics() if t.startswith("/mbde/sensors/")]
        return list(r.messages(topics))


class Sink:
    def __init__(self):
        self.msgs = {}
        self.logs = []

    def publish(self, key, msg):
        self.msgs.setdefault(key, []).append(msg)

    def log(self, level, text):
        self.logs.append((level, text))


def live(bag, name="ukf", **kw):
    sink = Sink()
    opts = EstimatorOptions(name, load_config(name, CONFIG), **kw)
    core = LiveEstimator(from_description(description(bag)), opts, RosbagsFactory(), sink.publish, sink.log)
    return core, sink
