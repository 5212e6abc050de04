"""The estimator interface is explicit and every class the stage drives implements all of it.

:class:`~mbde_core.estimators.base.EstimatorInterface` is an abc: a class that misses one of
its methods cannot be instantiated. Checked here for every registered estimator and for the
stand-ins the stage drives instead of one (the multi-start bank), with the signatures, and
by driving each through the stage. The live bug of a bank without
``add_restart_hypotheses`` (a silence while the bank decides) is the regression case.
"""
import inspect

import numpy as np
import pytest

from conftest import mech_path
from mbde_core.config.yamlnode import parse_yaml
from mbde_core.engine.integrators import MBState, get_integrator
from mbde_core.estimators import make_estimator
from mbde_core.estimators.base import Estimator, EstimatorInterface, InitialState
from mbde_core.estimators.configure import defaults
from mbde_core.estimators.registry import estimator_class, names
from mbde_core.estimators.stage.core import EstimatorStage
from mbde_core.estimators.stage.multistart import MultiStart
from mbde_core.estimators.traits import Traits
from mbde_core.model.mechanism import load_mechanism
from mbde_core.sensors.config import load_sensors
from mbde_core.types import Measurement

SENSORS = """
- {name: gyro, type: gyroscope, body: coupler, rate: 200, noise: {sigma: 0.01}}
- {name: acc, type: accelerometer, body: rocker, offset: [2.5, 0], axes: [0, pi/2], rate: 200, noise: {sigma: 0.05}}
"""
INTERFACE = sorted(EstimatorInterface.__abstractmethods__)


def stand_ins():
    """Every class the stage drives: the estimators and the multi-start bank."""
    return [estimator_class(n) for n in names()] + [MultiStart]


def test_the_interface_lists_what_the_stage_calls():
    assert set(INTERFACE) == {"reset", "predict", "update", "estimate", "rebase", "reacquire",
                              "add_restart_hypotheses", "particles", "diagnostics", "expect_steps"}


@pytest.mark.parametrize("cls", stand_ins(), ids=lambda c: c.__name__)
def test_every_class_implements_the_whole_interface(cls):
    assert issubclass(cls, EstimatorInterface)
    assert not inspect.isabstract(cls), sorted(cls.__abstractmethods__)
    for name in INTERFACE:
        want = inspect.signature(getattr(EstimatorInterface, name))
        have = inspect.signature(getattr(cls, name))
        w, h = list(want.parameters.values()), list(have.parameters.values())
        assert [p.name for p in h[: len(w)]] == [p.name for p in w], (cls.__name__, name, have)
        for p in h[len(w):]:  # extra parameters must be optional
            assert p.default is not inspect.Parameter.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD), (cls, name)
    if cls is not MultiStart:
        assert issubclass(cls, Estimator) and isinstance(cls.traits, Traits)
        assert cls.name in names()


@pytest.fixture(scope="module")
def data():
    m = load_mechanism(mech_path("fourbar"))
    ss = load_sensors(parse_yaml(SENSORS), m)
    rng = np.random.default_rng(5)
    integ = get_integrator("rk4")
    s = MBState(m.q0, m.qd0)
    ms, h = [], 1e-3
    for k in range(1601):
        t = k * h
        if k % 5 == 0:
            ms.append(Measurement(t, "gyro", ss["gyro"].h(s.q, s.qd) + 0.01 * rng.standard_normal(1)))
        s = integ.step(m, t, s, h)
    return m, ss, ms


def _stage(m, ss, name):
    cfg = defaults(name)
    if name in ("pf", "vipf"):
        cfg = dict(cfg, particles=50, uniform=dict(cfg["uniform"], particles=200))
    est = make_estimator(name, m, ss, cfg, rng=np.random.default_rng(0))
    init = InitialState(m.q0[m.independent], m.qd0[m.independent], np.array([0.05]), np.array([0.5]), m.q0)
    return EstimatorStage.for_estimator(est, lambda t: init)


@pytest.mark.parametrize("name", ["ukf", "errorekf", "viekf", "dekf", "cekf", "diekfpm", "pf", "vipf", "adekf"])
def test_the_stage_drives_every_estimator_through_jumps_and_silences(data, name):
    """A backward jump (the bank decides between the track and a restart, for the local
    observers), then a silence while it decides: every method of the interface is called
    on whatever the stage drives; no exception, finite estimates."""
    m, ss, ms = data
    stage = _stage(m, ss, name)
    head = [x for x in ms if x.stamp <= 1.3]  # then back by more than the stage's backward_jump (1 s)
    stage.feed(head)
    # the clock jumps back to the first stamp (a loop): readings of 0.0-0.03 s, then none
    # for 0.2 s (> the stage's lost check, within the bank's window), then more
    again = [Measurement(x.stamp, x.sensor, x.value) for x in ms if x.stamp <= 0.03]
    later = [Measurement(x.stamp, x.sensor, x.value) for x in ms if 0.23 <= x.stamp <= 0.5]
    stage.feed(again)
    if stage.est.traits.local:
        assert stage._bank is not None  # the bank is deciding
    stage.feed(later)
    stage.flush()
    assert stage.counters.resets == 1
    assert all(np.all(np.isfinite(r.estimate.z)) for r in stage.records)
    assert isinstance(stage.est.diagnostics(), dict)


def test_the_bank_implements_the_interface_on_its_members(data):
    """MultiStart stands in for the estimator: each method on its members (regression: the
    live node's ``'MultiStart' object has no attribute 'add_restart_hypotheses'``)."""
    m, ss, ms = data
    est = make_estimator("ukf", m, ss, defaults("ukf"))
    init = InitialState(m.q0[m.independent], m.qd0[m.independent], np.array([0.05]), np.array([0.5]), m.q0)
    est.reset(0.0, init)
    starts = [InitialState(m.q0[m.independent] + d, m.qd0[m.independent], np.array([0.05]), np.array([0.5]), m.q0)
              for d in (0.1, -0.1)]
    bank = MultiStart(est, 0.0, starts, 0.3, 25.0, keep=True)
    assert len(bank) == 3 and bank.mech is m and bank.traits is est.traits
    bank.expect_steps(10)
    bank.predict(0.005)
    res = bank.update([ms[1]])
    assert res.accepted == ["gyro"]
    assert bank.add_restart_hypotheses("silence") is False  # Kalman members: the stage decides
    assert bank.particles() is None and isinstance(bank.diagnostics(), dict)
    bank.rebase(1.0)
    assert bank.t == 1.0
    bank.reacquire(4.0)
    bank.reset(2.0, init)
    assert len(bank) == 1 and bank.members[0] is est and est.t == 2.0
